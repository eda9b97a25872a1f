"""A message whose destination has no binding lands in the unroutable queue; the drain marks
its row failed with the reason and removes it from the queue."""

import pytest
from django.utils import timezone

from scheduling.models import Endpoint, ScheduledMessage
from scheduling.services.relay import relay_publish
from scheduling.services.unroutable import unroutable_drain
from harness.waiting import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.broker]


def test_unbound_destination_is_marked_failed_with_a_reason(platform, endpoint_name, amqp):
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=platform["v2"])  # never bound
    message = ScheduledMessage.objects.create(
        endpoint=endpoint, topology=endpoint.topology, payload={}, due_at=timezone.now(), requested_delay_ms=0
    )
    relay_publish(ids=[str(message.id)])
    wait_until(lambda: amqp.queue_depth("dp.v2.delay-unroutable"), 5, message="unroutable")
    assert unroutable_drain() == 1
    message.refresh_from_db()
    assert message.status == ScheduledMessage.Status.FAILED
    assert f"no queue is bound for '{endpoint_name}' on dp.v2.delay-delivery" in message.last_error
    assert amqp.queue_depth("dp.v2.delay-unroutable") == 0

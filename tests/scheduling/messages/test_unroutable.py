"""A message whose destination has no binding lands in the unroutable queue; the drain marks
its row failed with the reason and removes it from the queue."""

import pytest
from django.utils import timezone

from scheduling.messages import wire
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.endpoints.services import endpoint_bind
from scheduling.messages.services import message_republish
from scheduling.messages.relay import relay_publish
from scheduling.messages.unroutable import unroutable_drain
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


def test_a_copy_from_before_a_republish_does_not_fail_the_republished_message(platform, endpoint_name, amqp,
                                                                              django_capture_on_commit_callbacks):
    """The rescue copies an overdue message until the drain marks it failed; a copy that reaches the
    unroutable queue after that drain, and after the operator re-bound and republished, is stale."""
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=platform["v3"])  # unbound
    message = ScheduledMessage.objects.create(
        endpoint=endpoint, topology=endpoint.topology, payload={}, due_at=timezone.now(), requested_delay_ms=0
    )
    relay_publish(ids=[str(message.id)])
    wait_until(lambda: amqp.queue_depth("dp.v3.delay-unroutable"), 5, message="unroutable")
    assert unroutable_drain() == 1
    message.refresh_from_db()
    late_copy, _ = wire.outgoing(message, platform["v3"].cascade, message.published_at, margin_ms=0)  # a rescue's
    amqp.publish([late_copy])
    wait_until(lambda: amqp.queue_depth("dp.v3.delay-unroutable"), 5, message="the late copy unroutable")
    endpoint_bind(endpoint=endpoint)
    with django_capture_on_commit_callbacks(execute=True):  # the republish publishes after its commit
        message_republish(message_id=message.id)
    message.refresh_from_db()
    assert message.status == ScheduledMessage.Status.PUBLISHED
    assert unroutable_drain() == 0
    message.refresh_from_db()
    assert message.status == ScheduledMessage.Status.PUBLISHED and amqp.queue_depth(endpoint_name) == 1
    assert amqp.queue_depth("dp.v3.delay-unroutable") == 0  # acked, not left for an operator

"""A message whose destination has no binding lands in the unroutable queue; the drain marks
its row failed with the reason and removes it from the queue."""

from datetime import timedelta

import pytest
from django.utils import timezone

from harness.waiting import wait_until
from scheduling.endpoints.services import endpoint_bind
from scheduling.messages import wire
from scheduling.messages.relay import relay_publish
from scheduling.messages.services import message_republish
from scheduling.messages.unroutable import unroutable_drain
from scheduling.models import Endpoint, ScheduledMessage

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


def test_an_unroutable_event_copy_fails_none_of_its_messages_the_rescue_sends_each(platform, endpoint_name, amqp,
                                                                                 settings):
    """The fan-out queue not bound (provision_delays not run since the upgrade): the event's rows are
    not at fault; they stay published and the rescue sends each alone once overdue. With the rescue
    off, they are failed with the reason, as any unroutable copy's."""
    from harness.endpoints import bind_endpoint
    from scheduling.config.conf import broker
    from scheduling.messages.rescue import message_rescue_overdue
    from scheduling.models import Event
    from topology import cascade

    settings.DELAY_ENVELOPES = True
    bind_endpoint(amqp, cascade.V3, endpoint_name)
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=platform["v3"])

    def event_rows():
        due = timezone.now()
        event = Event.objects.create(team=endpoint.team, topic="t", payload={}, due_at=due, message_count=3)
        return [ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, event=event, payload={},
                                                due_at=due, requested_delay_ms=0) for _ in range(3)]

    rows, unrescued = event_rows(), None
    amqp.unbind(cascade.fanout_binding(cascade.V3))
    try:
        relay_publish(ids=[str(r.id) for r in rows])
        wait_until(lambda: amqp.queue_depth("dp.v3.delay-unroutable"), 5, message="the event copy unroutable")
        assert unroutable_drain() == 0  # nothing failed
        assert amqp.queue_depth("dp.v3.delay-unroutable") == 0
        settings.DELAY_RESCUE_AFTER_MS = 0
        unrescued = event_rows()
        relay_publish(ids=[str(r.id) for r in unrescued])
        wait_until(lambda: amqp.queue_depth("dp.v3.delay-unroutable"), 5, message="the second copy unroutable")
        assert unroutable_drain() == 3
    finally:
        amqp.bind(cascade.fanout_binding(cascade.V3))
    assert {r.status for r in ScheduledMessage.objects.filter(id__in=[r.id for r in unrescued])} == {
        ScheduledMessage.Status.FAILED}
    settings.DELAY_RESCUE_AFTER_MS = 1000
    ScheduledMessage.objects.filter(id__in=[r.id for r in rows]).update(
        due_at=timezone.now() - timedelta(seconds=5), published_at=timezone.now() - timedelta(seconds=5))
    assert message_rescue_overdue(queues={endpoint_name}, skip=set(), publish=broker().publish, limit=10) == 3
    wait_until(lambda: amqp.queue_depth(endpoint_name) == 3, 5, message="each message's own copy")
    amqp.delete_queue(endpoint_name)

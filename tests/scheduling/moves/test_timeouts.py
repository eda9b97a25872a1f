"""The timeout manager on the real database and broker: rows of timeout-manager endpoints wait
in the database, are published straight to their queue when due, and two publishers running at
once never publish the same row; migrating hands pending rows to the native cascade."""

from datetime import timedelta

import pytest
from django.utils import timezone

from harness.at_once import at_once
from scheduling.messages import wire
from scheduling.messages.relay import relay_publish, timeout_publish_due
from scheduling.messages.services import message_schedule
from scheduling.models import DeliveryMode, Endpoint, ScheduledMessage
from scheduling.moves.timeouts import timeout_migrate
from topology import cascade

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status


@pytest.fixture
def tm_endpoint(platform, endpoint_name, amqp):
    amqp.declare_queue(cascade.endpoint_queue(endpoint_name))
    yield Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=platform["v1"],
                                  delivery_mode=DeliveryMode.TIMEOUT_MANAGER)
    amqp.delete_queue(endpoint_name)


def drain_ids(conn, queue):
    channel, ids = conn.conn.channel(), []
    while (message := channel.basic_get(queue, no_ack=True)) is not None:
        ids.append(message.headers[wire.H_MESSAGE_ID])
    channel.close()
    return ids


def test_rows_wait_in_the_database_until_due(tm_endpoint, amqp):
    soon = message_schedule(endpoint=tm_endpoint.name, payload={}, delay=0.5)
    later = message_schedule(endpoint=tm_endpoint.name, payload={}, delay=3600)
    assert soon.delivery_mode == DeliveryMode.TIMEOUT_MANAGER
    assert relay_publish(older_than=timedelta(0)).published == 0  # the relay leaves them alone
    assert timeout_publish_due().published == 1
    soon.refresh_from_db(), later.refresh_from_db()
    assert (soon.status, soon.first_exchange, soon.routing_key) == (Status.PUBLISHED, "", tm_endpoint.name)
    assert later.status == Status.PENDING
    assert drain_ids(amqp, tm_endpoint.name) == [str(soon.id)]


def test_two_publishers_at_once_publish_each_row_once(tm_endpoint, amqp):
    now = timezone.now()
    ScheduledMessage.objects.bulk_create(
        ScheduledMessage(endpoint=tm_endpoint, topology=tm_endpoint.topology, payload={"i": i}, due_at=now,
                         requested_delay_ms=0, delivery_mode=DeliveryMode.TIMEOUT_MANAGER)
        for i in range(1000)
    )
    counts = at_once(lambda: timeout_publish_due().published)
    ids = drain_ids(amqp, tm_endpoint.name)
    assert sum(counts) == 1000 and len(ids) == 1000 and len(set(ids)) == 1000
    assert all(counts), f"one publisher did everything: {counts}"  # they really ran at once
    assert ScheduledMessage.objects.filter(status=Status.PUBLISHED).count() == 1000


def test_migrating_hands_pending_timeouts_to_the_cascade_and_hides_them(tm_endpoint, amqp, platform):
    early = message_schedule(endpoint=tm_endpoint.name, payload={}, delay=30)
    late = [message_schedule(endpoint=tm_endpoint.name, payload={}, delay=600 + i) for i in range(5)]
    cutoff = timezone.now() + timedelta(seconds=60)
    preview = timeout_migrate(to=platform["v2"], cutoff=cutoff, dry_run=True)
    assert (preview.endpoints, preview.to_move, preview.before_cutoff, preview.moved) == (1, 5, 1, 0)
    assert ScheduledMessage.objects.filter(delivery_mode=DeliveryMode.TIMEOUT_MANAGER).count() == 6

    result = timeout_migrate(to=platform["v2"], cutoff=cutoff)
    assert (result.moved, result.published, result.before_cutoff) == (5, 5, 1)
    tm_endpoint.refresh_from_db()
    assert (tm_endpoint.delivery_mode, tm_endpoint.topology.name) == (DeliveryMode.NATIVE, "v2")
    for row in late:
        row.refresh_from_db()
        assert (row.delivery_mode, row.topology.name, row.status) == (DeliveryMode.NATIVE, "v2", Status.PUBLISHED)
        assert row.first_exchange.startswith("dp.v2.delay-level-")
    early.refresh_from_db()
    assert (early.delivery_mode, early.status) == (DeliveryMode.TIMEOUT_MANAGER, Status.PENDING)
    # the timeout manager can no longer see the moved rows, even when they fall due
    ScheduledMessage.objects.filter(id__in=[r.id for r in late]).update(due_at=timezone.now())
    ScheduledMessage.objects.filter(id__in=[r.id for r in late]).update(status=Status.PENDING)
    assert timeout_publish_due().published == 0
    assert drain_ids(amqp, tm_endpoint.name) == []


def test_a_row_that_cannot_be_built_fails_alone_and_the_others_are_published(tm_endpoint, amqp):
    """A celery_queue endpoint's timeouts, one of them not a task (its handler was another when it
    was scheduled): that one fails with the reason, the rest of the run is published."""
    Endpoint.objects.filter(pk=tm_endpoint.pk).update(handler=Endpoint.Handler.CELERY_QUEUE)
    now = timezone.now()

    def timeout(payload):
        return ScheduledMessage.objects.create(endpoint=tm_endpoint, topology=tm_endpoint.topology, payload=payload,
                                               due_at=now, requested_delay_ms=0,
                                               delivery_mode=DeliveryMode.TIMEOUT_MANAGER)

    good = [timeout({"task": "testapp.plain_receipt", "args": [n]}) for n in range(2)]
    bad = timeout({"n": 1})
    result = timeout_publish_due()
    assert (result.published, result.unbuildable) == (2, 1)
    assert sorted(drain_ids(amqp, tm_endpoint.name)) == sorted(str(m.id) for m in good)
    bad.refresh_from_db()
    assert bad.status == Status.FAILED and "its payload is not a Celery task" in bad.last_error
    assert timeout_publish_due().unbuildable == 0

"""The relay against the live broker: rows become confirmed publishes exactly once; a broker
that refuses connections leaves them pending with the reason."""

import json
import time
import uuid
from datetime import timedelta

import pytest
from django.test import TestCase
from django.utils import timezone
from prometheus_client import REGISTRY

from scheduling.core.errors import Conflict
from scheduling.endpoints.services import endpoint_update
from scheduling.messages import wire
from scheduling.messages.relay import relay_publish, relay_publish_rows
from scheduling.messages.services import message_republish, message_schedule
from scheduling.models import Endpoint, ScheduledMessage
from tests.topology.helpers import get, wait_get
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
Status = ScheduledMessage.Status


@pytest.fixture
def endpoint(bound_endpoint):
    return bound_endpoint("v2")


def row(endpoint, seconds, **fields):
    now = timezone.now()
    fields.setdefault("payload", {"s": seconds})
    return ScheduledMessage.objects.create(
        endpoint=endpoint, topology=endpoint.topology,
        due_at=now + timedelta(seconds=seconds), requested_delay_ms=int(seconds * 1000), **fields,
    )


def test_due_message_goes_straight_to_the_endpoint_queue(endpoint, amqp):
    message = row(endpoint, 0)
    assert relay_publish(ids=[str(message.id)]).published == 1
    message.refresh_from_db()
    assert message.status == Status.PUBLISHED and message.published_at is not None
    assert message.first_exchange == "dp.v2.delay-delivery"
    assert message.routing_key == "0." * 28 + endpoint.name
    got, _ = wait_get(amqp, endpoint.name, timeout=3)
    assert got.headers["task"] == "scheduling.deliver" and got.headers[wire.H_MESSAGE_ID] == str(message.id)
    assert json.loads(got.body)[0] == [str(message.id)]
    assert got.properties["delivery_mode"] == 2


def test_delayed_message_starts_at_its_highest_level(endpoint, amqp):
    message = row(endpoint, 3600)
    relay_publish(ids=[str(message.id)])
    message.refresh_from_db()
    # 3600 s - margin -> 3599 s = 0b111000001111: highest bit is level 11
    assert message.first_exchange == "dp.v2.delay-level-11"
    level_queue = cascade.level_name("dp.v2.", 11)
    assert amqp.queue_depth(level_queue) == 1
    got = get(amqp, level_queue)
    assert got.headers[wire.H_DUE_AT_MS] == message.due_at_ms


def test_a_row_is_published_once_however_often_the_relay_runs(endpoint, amqp):
    rows = [row(endpoint, 0) for _ in range(5)]
    ids = [str(r.id) for r in rows]
    assert relay_publish(ids=ids).published == 5
    assert relay_publish(ids=ids).published == 0
    assert relay_publish(older_than=timedelta(0)).published == 0
    for _ in range(5):
        assert wait_get(amqp, endpoint.name, timeout=3)[0] is not None
    assert get(amqp, endpoint.name) is None


def test_cancelled_rows_are_not_published(endpoint, amqp):
    message = row(endpoint, 0, status=Status.CANCELLED)
    assert relay_publish(ids=[str(message.id)]).published == 0
    assert get(amqp, endpoint.name) is None


def test_sweeper_publishes_only_rows_older_than_the_grace(endpoint):
    old, new = row(endpoint, 60), row(endpoint, 60)
    ScheduledMessage.objects.filter(id=old.id).update(created_at=timezone.now() - timedelta(seconds=10))
    assert relay_publish(older_than=timedelta(seconds=5)).published == 1
    old.refresh_from_db(), new.refresh_from_db()
    assert (old.status, new.status) == (Status.PUBLISHED, Status.PENDING)


def test_broker_refusing_connections_leaves_rows_pending(endpoint, settings):
    message = row(endpoint, 0)
    settings.BROKER_URL = "amqp://guest:guest@127.0.0.1:1//"
    result = relay_publish(ids=[str(message.id)])
    assert result.published == 0 and result.failed == 1
    message.refresh_from_db()
    assert message.status == Status.PENDING and "Connection refused" in message.last_error


def test_missing_cascade_leaves_rows_pending_with_the_reason(versions, endpoint_name, amqp):
    version = versions["v1"]
    version.prefix = "nowhere."
    version.save()
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=version)
    message = row(endpoint, 5)
    result = relay_publish(ids=[str(message.id)])
    assert result.published == 0
    message.refresh_from_db()
    assert message.status == Status.PENDING and "no exchange 'nowhere.delay-level-02'" in message.last_error


def test_a_publisher_connection_lost_under_a_batch_is_replaced_at_once(endpoint, amqp):
    """What a cluster node's death looks like to a web process: its long-lived publisher
    connection is gone. The rows are published at once on a new connection, not left to the
    sweeper (which made them seconds late, issue 22)."""
    import socket

    from scheduling.config.conf import broker
    from scheduling.messages.gathering import GATHERER
    from scheduling.messages.relay import relay_publish_rows

    warm = row(endpoint, 0)
    assert relay_publish_rows(rows=[warm]).published == 1
    conn = broker().publisher_connections()[GATHERER.thread_name]  # the process's publisher thread's
    conn.connection.transport.sock.shutdown(socket.SHUT_RDWR)  # the socket dies under the connection
    rows = [row(endpoint, 0) for _ in range(3)]
    result = relay_publish_rows(rows=rows)
    assert (result.published, result.failed) == (3, 0), result.errors
    assert broker().publisher_connections()[GATHERER.thread_name] is not conn
    assert ScheduledMessage.objects.filter(id__in=[r.id for r in rows], status=Status.PUBLISHED).count() == 3
    for _ in range(4):
        assert wait_get(amqp, endpoint.name, 5)[0] is not None  # the warm one and the three


@pytest.fixture
def v3_endpoint(bound_endpoint):
    return bound_endpoint("v3")


def test_with_envelopes_a_batch_due_in_one_second_is_one_broker_message(v3_endpoint, amqp, settings):
    settings.DELAY_ENVELOPES = True
    due = (timezone.now() + timedelta(seconds=3)).replace(microsecond=100_000)
    rows = [ScheduledMessage.objects.create(endpoint=v3_endpoint, topology=v3_endpoint.topology, payload={"n": n},
                                            due_at=due + timedelta(milliseconds=100 * n), requested_delay_ms=3000)
            for n in range(5)]
    later = row(v3_endpoint, 10)
    counted = [REGISTRY.get_sample_value(f"delay_relay_{name}_total", {"version": "v3"}) or 0
               for name in ("published", "broker_messages")]
    assert relay_publish(ids=[str(r.id) for r in [*rows, later]]).published == 6
    assert [(REGISTRY.get_sample_value(f"delay_relay_{name}_total", {"version": "v3"}) or 0) - before
            for name, before in zip(("published", "broker_messages"), counted)] == [6, 2]
    published = {r.id: r for r in ScheduledMessage.objects.filter(status=Status.PUBLISHED)}
    assert len(published) == 6 and len({published[r.id].first_exchange for r in rows}) == 1
    levels = {published[r.id].first_exchange for r in [*rows, later]}
    messages = [m for level in levels for m in iter(lambda level=level: get(amqp, level), None)]
    assert len(messages) == 2  # 5 messages in one envelope, the later one alone
    (envelope,) = [m for m in messages if m.headers["task"] == wire.ENVELOPE_TASK]
    assert wire.envelope_ids(envelope.headers, envelope.body) == [str(r.id) for r in rows]
    (alone,) = [m for m in messages if m.headers["task"] == wire.DELIVER_TASK]
    assert alone.headers[wire.H_MESSAGE_ID] == str(later.id)


def test_v2_never_uses_envelopes(endpoint, amqp, settings):
    settings.DELAY_ENVELOPES = True
    due = timezone.now() + timedelta(seconds=3)
    rows = [ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, payload={}, due_at=due,
                                            requested_delay_ms=3000) for _ in range(3)]
    assert relay_publish(ids=[str(r.id) for r in rows]).published == 3
    level = ScheduledMessage.objects.get(id=rows[0].id).first_exchange
    messages = list(iter(lambda: get(amqp, level), None))
    assert [m.headers["task"] for m in messages] == [wire.DELIVER_TASK] * 3


# --- one row that cannot be built fails alone; its batch is published ----------------------------

# A raw Celery task message as a caller could write it in a payload: pickle, and a CC header copying
# it into the relay's queue. Only a task the platform captured itself may go as it was captured.
RAW_TASK = {"celery": {"task": "scheduling.relay.sweep", "queue": "celery", "content_type": "application/x-python-serialize",
                       "content_encoding": "binary", "body": "gASVAgAAAAAAAAB9lC4=",
                       "headers": {"task": "scheduling.relay.sweep", "id": "x", "CC": ["dp.relay"]},
                       "properties": {}}}
TASK = {"task": "testapp.plain_receipt", "args": [1]}


def drained_ids(amqp, queue: str, expected: int, timeout: float = 5) -> list[str]:
    """The x-dp-message-id of every message in the queue (waiting up to ``timeout`` for ``expected``)."""
    ids, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = get(amqp, queue)
        if message is not None:
            ids.append(message.headers[wire.H_MESSAGE_ID])
        elif len(ids) >= expected:
            break
        else:
            time.sleep(0.02)
    return ids


@pytest.fixture
def task_endpoint(endpoint):
    """The module's endpoint as a celery_queue one (its queue bound on v2)."""
    Endpoint.objects.filter(pk=endpoint.pk).update(handler=Endpoint.Handler.CELERY_QUEUE)
    return Endpoint.objects.select_related("topology", "team").get(pk=endpoint.pk)


def test_a_row_that_cannot_be_built_fails_alone_and_its_batch_is_published(task_endpoint, amqp):
    """The payload left by a handler that was not celery_queue when it was scheduled: the relay
    (and the sweeper, every run) used to raise on it with the whole batch, every team's."""
    good = [row(task_endpoint, 0, payload=TASK), row(task_endpoint, 0, payload={**TASK, "args": [2]})]
    bad = row(task_endpoint, 0, payload={"n": 1})
    result = relay_publish(ids=[str(m.id) for m in [*good, bad]])
    assert (result.published, result.unbuildable, result.failed) == (2, 1, 0)
    assert sorted(drained_ids(amqp, task_endpoint.queue, 2)) == sorted(str(m.id) for m in good)
    bad.refresh_from_db()
    assert bad.status == Status.FAILED and bad.finished_at is not None
    assert "its payload is not a Celery task" in bad.last_error
    assert {m.status for m in ScheduledMessage.objects.filter(pk__in=[m.pk for m in good])} == {Status.PUBLISHED}
    assert relay_publish(older_than=timedelta(0)).unbuildable == 0  # the next run finds nothing left of it


def test_a_caller_s_raw_celery_payload_is_not_republished_as_a_task(endpoint):
    """A message scheduled while its endpoint was not a celery_queue one, its payload shaped as
    DelayedTask's capture, failed; its endpoint then became one (nothing in flight): republishing it
    is refused, as scheduling it as a task would be."""
    crafted = message_schedule(endpoint=endpoint, payload=RAW_TASK, delay=600)
    ScheduledMessage.objects.filter(pk=crafted.pk).update(status=Status.FAILED, finished_at=timezone.now())
    endpoint_update(endpoint=endpoint, handler=Endpoint.Handler.CELERY_QUEUE)
    with pytest.raises(Conflict, match="a raw Celery task message is not accepted"):
        message_republish(message_id=crafted.id)
    crafted.refresh_from_db()
    assert crafted.status == Status.FAILED


def test_a_caller_s_raw_celery_payload_never_takes_the_raw_path(endpoint, amqp):
    """A caller's message shaped as DelayedTask's capture, on an endpoint that became a
    celery_queue one under it (as the admin allowed before): it fails alone, with the reason, and
    nothing of it reaches the broker; its neighbour in the publisher thread's batch goes."""
    scheduled = message_schedule(endpoint=endpoint, payload=RAW_TASK, delay=0)
    Endpoint.objects.filter(pk=endpoint.pk).update(handler=Endpoint.Handler.CELERY_QUEUE)
    ScheduledMessage.objects.filter(pk=scheduled.pk).update(status=Status.PENDING, published_at=None)
    crafted = ScheduledMessage.objects.select_related("endpoint", "topology").get(pk=scheduled.pk)
    neighbour = row(crafted.endpoint, 0, payload=TASK)
    result = relay_publish_rows(rows=[crafted, neighbour])  # the process's publisher thread's way
    assert drained_ids(amqp, endpoint.queue, 1) == [str(neighbour.id)]
    assert (result.published, result.unbuildable) == (1, 1)
    crafted.refresh_from_db()
    assert crafted.status == Status.FAILED and "its payload is not a Celery task" in crafted.last_error


# --- an event's rows: one event copy in the cascade (docs/concepts/fan-out.md) ----------------------


@pytest.fixture
def fan_endpoints(platform, amqp):
    """Three endpoints on v3 (a record-only, a webhook-less celery_task and a Celery queue's), bound."""
    from harness.endpoints import bind_endpoint

    made = []
    for handler in (Endpoint.Handler.NONE, Endpoint.Handler.CELERY_TASK, Endpoint.Handler.CELERY_QUEUE):
        name = f"fan-{handler.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
        bind_endpoint(amqp, cascade.V3, name)
        made.append(Endpoint.objects.create(name=name, queue=name, topology=platform["v3"], handler=handler,
                                            handler_target="testapp.record_receipt"
                                            if handler == Endpoint.Handler.CELERY_TASK else ""))
    yield made
    for endpoint in made:
        amqp.delete_queue(endpoint.queue)


def fan_payload(endpoint):
    return {"task": "testapp.record_receipt", "args": [1]} if endpoint.handler == Endpoint.Handler.CELERY_QUEUE \
        else {"n": 1}


def counted():
    return [REGISTRY.get_sample_value(f"delay_relay_{name}_total", {"version": "v3"}) or 0
            for name in ("published", "broker_messages")]


def level_messages(amqp, rows):
    """The broker messages carrying these rows, from their levels' queues (other tests' messages
    of the module's vhost left out)."""
    ids = {str(r.id) for r in rows}
    levels = {r.first_exchange for r in ScheduledMessage.objects.filter(id__in=[r.id for r in rows])}
    return [m for level in levels for m in iter(lambda level=level: get(amqp, level), None)
            if ids & set(wire.carried_ids(m.headers, m.body))]


def test_an_events_rows_cross_the_cascade_as_one_event_copy_after_the_commit(fan_endpoints, amqp, settings,
                                                                            monkeypatch):
    """50 rows of one event (record-only, celery_task and Celery-queue endpoints): one broker message
    to the fan-out queue, every row published with its route, the metrics say 50 rows in 1."""
    from harness.events import schedule_event

    settings.DELAY_ENVELOPES = True
    targets = [fan_endpoints[n % 3] for n in range(50)]
    before = counted()
    with TestCase.captureOnCommitCallbacks(execute=True):
        event, _ = schedule_event(endpoints=targets, payload=fan_payload, deliver_at=timezone.now() + timedelta(seconds=30))
    assert [after - b for after, b in zip(counted(), before)] == [50, 1]
    stored = list(ScheduledMessage.objects.filter(event=event))
    assert len(stored) == 50 and {r.status for r in stored} == {Status.PUBLISHED}
    assert len({(r.first_exchange, r.routing_key) for r in stored}) == 1
    assert stored[0].routing_key == cascade.FANOUT_QUEUE
    (copy,) = level_messages(amqp, stored)
    assert copy.headers["task"] == wire.FAN_OUT_TASK and copy.headers[wire.H_EVENT] == str(event.id)
    read = wire.read_event_copy(copy.headers, copy.body)
    assert sorted(read.ids) == sorted(str(r.id) for r in stored) and read.event_id == str(event.id)
    assert read.published_at_ms == wire.to_epoch_ms(stored[0].published_at)
    assert sorted(wire.carried_ids(copy.headers, copy.body)) == sorted(read.ids)  # the drain and the moves' view
    assert copy.headers[wire.H_DUE_AT_MS] == stored[0].due_at_ms and copy.headers[wire.H_VERSION] == "v3"


def test_the_sweeper_sends_an_events_pending_rows_as_one_event_copy(fan_endpoints, amqp, settings):
    from scheduling.models import Event

    settings.DELAY_ENVELOPES = True
    due = timezone.now() + timedelta(seconds=20)
    event = Event.objects.create(team=fan_endpoints[0].team, topic="t", payload={}, due_at=due, message_count=6)
    rows = [ScheduledMessage.objects.create(endpoint=e, topology=e.topology, event=event, payload=fan_payload(e),
                                            due_at=due, requested_delay_ms=20000) for e in fan_endpoints * 2]
    alone = row(fan_endpoints[0], 20)
    before = counted()
    assert relay_publish(ids=[str(r.id) for r in [*rows, alone]]).published == 7
    assert [after - b for after, b in zip(counted(), before)] == [7, 2]
    messages = level_messages(amqp, [*rows, alone])
    assert sorted(m.headers["task"] for m in messages) == sorted([wire.FAN_OUT_TASK, wire.DELIVER_TASK])


def test_an_events_row_alone_in_its_batch_and_v2_events_go_one_message_per_row(fan_endpoints, amqp, settings,
                                                                               endpoint):
    from scheduling.models import Event

    settings.DELAY_ENVELOPES = True
    due = timezone.now() + timedelta(seconds=20)
    event = Event.objects.create(team=endpoint.team, topic="t", payload={}, due_at=due, message_count=4)
    v2_rows = [ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, event=event, payload={},
                                               due_at=due, requested_delay_ms=20000) for _ in range(3)]
    lone = ScheduledMessage.objects.create(endpoint=fan_endpoints[0], topology=fan_endpoints[0].topology, event=event,
                                           payload={}, due_at=due, requested_delay_ms=20000)
    assert relay_publish(ids=[str(r.id) for r in [*v2_rows, lone]]).published == 4
    messages = level_messages(amqp, [*v2_rows, lone])
    assert [m.headers["task"] for m in messages] == [wire.DELIVER_TASK] * 4  # v2 byte-compatible; one row alone


def test_with_envelopes_off_an_events_rows_go_one_message_per_row(fan_endpoints, amqp, settings):
    from scheduling.models import Event

    settings.DELAY_ENVELOPES = False
    due = timezone.now() + timedelta(seconds=20)
    event = Event.objects.create(team=fan_endpoints[0].team, topic="t", payload={}, due_at=due, message_count=2)
    rows = [ScheduledMessage.objects.create(endpoint=fan_endpoints[0], topology=fan_endpoints[0].topology, event=event,
                                            payload={}, due_at=due, requested_delay_ms=20000) for _ in range(2)]
    assert relay_publish(ids=[str(r.id) for r in rows]).published == 2
    assert [m.headers["task"] for m in level_messages(amqp, rows)] == [wire.DELIVER_TASK] * 2


def test_a_publish_pause_holds_for_a_sweep_period_after_a_refusal(settings):
    from scheduling.config.conf import conf
    from scheduling.messages.relay import PublishPause

    pause = PublishPause()  # the process's is publish_pause; a fresh one holds nothing back
    assert not pause.held()
    before = time.monotonic()
    pause.hold()
    assert pause.held() and before + conf().sweep_seconds <= pause.until <= time.monotonic() + conf().sweep_seconds
    pause.until = time.monotonic() - 0.001  # the period passed
    assert not pause.held()

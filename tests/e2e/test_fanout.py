"""One copy in the cascade per event (docs/concepts/fan-out.md), end to end: the relay in this
process sends an event's rows as one broker message; the real worker's delivery loop holds it
until due and fans it out, each row's copy to its endpoint (record-only, a webhook with a real
receiver, a Celery queue), each delivered once and none early. A copy handed over twice, a worker
killed while it fans out, a copy lost in the cascade: each handler still runs once."""

import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from prometheus_client import REGISTRY

from harness.celery_worker import Worker, celery_drained
from harness.events import schedule_event
from harness.paths import ARTIFACTS
from harness.recording_server import RecordingServer
from harness.testapp.models import Receipt
from harness.waiting import wait_until
from rabbit import Outgoing
from scheduling.config.conf import conf
from scheduling.core.clock import to_epoch_ms
from scheduling.messages import wire
from scheduling.models import Endpoint, ScheduledMessage
from tests.topology.helpers import get
from topology import cascade

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status
TASK = {"task": "testapp.plain_receipt", "args": ["fanned"]}


@pytest.fixture(autouse=True)
def envelopes(settings, monkeypatch):
    settings.DELAY_ENVELOPES = True
    monkeypatch.setattr("scheduling.messages.relay.publish_pause.until", 0.0)


@pytest.fixture
def make_endpoint(api, platform, worker, endpoint_name):
    def make(suffix, **body):
        response = api.post("/api/endpoints/", {"name": f"{endpoint_name}-{suffix}", "topology": "v3", **body},
                            format="json")
        assert response.status_code == 201, response.content
        return Endpoint.objects.get(name=f"{endpoint_name}-{suffix}")

    return make


def payload_of(endpoint):
    return dict(TASK) if endpoint.handler == Endpoint.Handler.CELERY_QUEUE else {"n": 1}


def counted():
    return [REGISTRY.get_sample_value(f"delay_relay_{name}_total", {"version": "v3"}) or 0
            for name in ("published", "broker_messages")]


def publish_event(targets, seconds=3.0):
    """The event's rows, written and (after the commit) sent by this process's relay."""
    with transaction.atomic():
        event, rows = schedule_event(endpoints=targets, payload=payload_of,
                                     deliver_at=timezone.now() + timedelta(seconds=seconds))
    return event, rows


def settled(ids, statuses=(Status.DELIVERED,)):
    def check():
        rows = list(ScheduledMessage.objects.filter(id__in=ids))
        return rows if len(rows) == len(ids) and all(r.status in statuses for r in rows) else None

    return check


def drain_tasks(amqp, queue, want, timeout):
    """Every task message that arrives in a Celery queue (no worker consumes it here), with its
    arrival time in epoch ms, until ``want`` came and 1 s more passed (a duplicate would show)."""
    got, deadline, quiet_until = [], time.monotonic() + timeout, None
    while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
        message = get(amqp, queue)
        if message is None:
            time.sleep(0.005)
            continue
        got.append((message, to_epoch_ms(timezone.now())))
        if len(got) >= want and quiet_until is None:
            quiet_until = time.monotonic() + 1.0
    return got


def test_an_event_of_50_crosses_the_cascade_as_one_message_each_delivered_once_never_early(make_endpoint, amqp):
    with RecordingServer() as server:
        record = make_endpoint("record")
        hook = make_endpoint("hook", handler="webhook", handler_target=server.url)
        tasks = make_endpoint("tasks", handler="celery_queue")
        targets = [(record, hook, tasks)[n % 3] for n in range(50)]
        before = counted()
        event, rows = publish_event(targets)
        assert [after - b for after, b in zip(counted(), before)] == [50, 1]  # 50 rows, one broker message
        published = wait_until(settled([r.id for r in rows], (Status.PUBLISHED, Status.DELIVERED)), 10,
                               message="published")
        assert {r.routing_key for r in published} == {cascade.FANOUT_QUEUE}
        queued = drain_tasks(amqp, tasks.queue, sum(t is tasks for t in targets), timeout=30)
        loop_ids = [r.id for r in rows if r.endpoint_id != tasks.id]
        delivered = wait_until(settled(loop_ids), 30, message="the loop's messages delivered")
        for row in delivered:
            assert row.delivered_at >= row.due_at and row.delivery_count == 1, row
            # fanned out at due, not rescued (DELAY_RESCUE_AFTER_MS later); a bound a busy machine keeps
            assert 0 <= row.lateness_ms < conf().rescue_after_ms, row.lateness_ms
        calls = [r for r in server.requests]
        assert sorted(c["headers"]["webhook-id"] for c in calls) == sorted(
            str(r.id) for r in rows if r.endpoint_id == hook.id)  # each webhook called once
    # the Celery queue's task messages: one each, none before its due time
    assert sorted(m.headers[wire.H_MESSAGE_ID] for m, _ in queued) == sorted(
        str(r.id) for r in rows if r.endpoint_id == tasks.id)
    for message, arrived_ms in queued:
        assert arrived_ms >= message.headers[wire.H_DUE_AT_MS], "a task arrived before it was due"


def test_an_event_copy_handed_over_twice_runs_each_handler_once(make_endpoint, amqp):
    handled = make_endpoint("handled", handler="celery_task", handler_target="testapp.record_receipt")
    event, rows = publish_event([handled] * 10)
    stored = wait_until(settled([r.id for r in rows], (Status.PUBLISHED,)), 10, message="published")
    out, _ = wire.outgoing_event(stored, stored[0].topology.cascade, stored[0].published_at,
                                 margin_ms=conf().arrival_margin_ms)
    assert amqp.publish([Outgoing("", cascade.FANOUT_QUEUE, out.body, out.headers, out.properties)]).confirmed == {0}
    delivered = wait_until(settled([r.id for r in rows]), 20, message="delivered")
    assert all(0 <= r.lateness_ms < conf().rescue_after_ms for r in delivered)  # by a fan-out, not the rescue
    celery_drained()
    time.sleep(1)  # a duplicate's handler would have run by now
    assert sorted(Receipt.objects.values_list("message_id", flat=True)) == sorted(str(r.id) for r in rows)


def test_a_worker_killed_while_it_fans_out_loses_nothing_and_runs_each_handler_once(make_endpoint, worker_env):
    """A second worker takes the event copy first or not; it is killed (SIGKILL, all its processes)
    just after the copy left the cascade (the arrival margin before due), mid-fan-out or around it.
    The module's worker finishes."""
    handled = make_endpoint("killed", handler="celery_task", handler_target="testapp.record_receipt")
    doomed = Worker("fanout-doomed", worker_env, ARTIFACTS / "worker-fanout-doomed.log").start()
    try:
        event, rows = publish_event([handled] * 300, seconds=4)
        fan_out_at = rows[0].due_at - timedelta(milliseconds=conf().arrival_margin_ms - 5)
        while timezone.now() < fan_out_at:
            time.sleep(0.001)
        doomed.kill()
    finally:
        doomed.stop()
    delivered = wait_until(settled([r.id for r in rows]), 60, message="every message delivered after the kill")
    assert all(r.delivered_at >= r.due_at for r in delivered)
    celery_drained()
    time.sleep(1)
    assert sorted(Receipt.objects.values_list("message_id", flat=True)) == sorted(str(r.id) for r in rows)


def own_copy_taken(amqp, level, event_id):
    """The event's copy taken out of its level queue, or None: copies the module's earlier tests
    left in the cascade (a rescue's, a duplicate's, naming rows their flush removed) may share the
    level and are dropped on the way."""
    while (message := get(amqp, level)) is not None:
        if message.headers.get("task") == wire.FAN_OUT_TASK and message.headers.get(wire.H_EVENT) == event_id:
            return message
    return None


def test_a_copy_lost_in_the_cascade_is_covered_by_the_rescue_each_row_alone(make_endpoint, amqp):
    """The event copy is taken out of its level queue (lost): each row is still delivered once, by
    its rescue copy, about DELAY_RESCUE_AFTER_MS late."""
    handled = make_endpoint("lost", handler="celery_task", handler_target="testapp.record_receipt")
    event, rows = publish_event([handled] * 5, seconds=3)
    stored = wait_until(settled([r.id for r in rows], (Status.PUBLISHED,)), 10, message="published")
    level = stored[0].first_exchange  # a level's exchange and queue share the name
    lost = own_copy_taken(amqp, level, str(event.id))
    assert lost is not None  # taken out, never acked back
    assert own_copy_taken(amqp, level, str(event.id)) is None
    delivered = wait_until(settled([r.id for r in rows]), 30, message="every message rescued")
    after_ms = conf().rescue_after_ms
    for row in delivered:
        assert row.delivery_count == 1 and row.lateness_ms >= after_ms - 50, row.lateness_ms
    celery_drained()
    assert sorted(Receipt.objects.values_list("message_id", flat=True)) == sorted(str(r.id) for r in rows)


def test_a_fan_out_cut_short_is_finished_by_the_next_copy_each_handler_once(make_endpoint, amqp):
    """What a worker killed mid-fan-out leaves, made exactly: a third of the rows fanned out and
    stamped (killed before its ack), a third with copies sent but not stamped (killed before its
    commit). The event copy handed over again fans out the rest; the duplicates are suppressed."""
    from scheduling.config.conf import broker
    from scheduling.messages.fanout import message_fan_out

    handled = make_endpoint("cut", handler="celery_task", handler_target="testapp.record_receipt")
    event, rows = publish_event([handled] * 30, seconds=2)
    stored = sorted(wait_until(settled([r.id for r in rows], (Status.PUBLISHED,)), 10, message="published"),
                    key=lambda r: str(r.id))
    copy_ms = to_epoch_ms(stored[0].published_at)
    stamped, sent = stored[:10], stored[10:20]
    assert message_fan_out(event_id=str(event.id), ids=[str(r.id) for r in stamped], published_at_ms=copy_ms,
                           publish=broker().publish).published == 10
    copies = [wire.outgoing(r, r.topology.cascade, timezone.now(), margin_ms=0)[0] for r in sent]
    assert broker().publish(copies).confirmed == set(range(10))  # sent, never stamped
    delivered = wait_until(settled([r.id for r in rows]), 30, message="every message delivered")
    assert all(r.delivered_at >= r.due_at for r in delivered)
    celery_drained()
    time.sleep(1)
    assert sorted(Receipt.objects.values_list("message_id", flat=True)) == sorted(str(r.id) for r in rows)


# --- moves: migrate_delays, transfer_delays (moves/delays.py) --------------------------------------


def event_copies_in(amqp, version: str) -> int:
    from scheduling.versions.broker import topology_count_by_level

    return sum(topology_count_by_level(session=amqp, version=cascade.get_version(version)).values())


def test_a_killed_migration_to_v2_splits_each_event_copy_into_its_rows_losing_nothing(make_endpoint, amqp,
                                                                                      worker_env):
    """v3 -> v2: v2 carries no event copies: each is split into its rows' own copies (a Celery queue's
    a task message, like the relay's), each with its remaining delay; a run killed between a split's
    publish and its ack moves it again, and each handler still runs once."""
    import random
    import subprocess
    import sys

    from harness.paths import ROOT
    from tests.e2e.test_moves import assert_each_delivered_once_on_time, run_killed

    handled = make_endpoint("moved", handler="celery_task", handler_target="testapp.record_receipt")
    other = make_endpoint("moved-too", handler="celery_task", handler_target="testapp.record_receipt")
    rng, ids = random.Random(5), []
    for _ in range(120):
        _, rows = publish_event([handled, other, handled], seconds=round(rng.uniform(12, 22), 3))
        ids += [r.id for r in rows]
    wait_until(lambda: ScheduledMessage.objects.filter(id__in=ids, status=Status.PUBLISHED).count() == len(ids), 30,
               0.2, "all published")
    assert event_copies_in(amqp, "v3") >= 120  # one broker message per event
    command = [sys.executable, "manage.py", "migrate_delays", "--from", "v3", "--to", "v2", "--batch", "1"]
    run_killed(command, worker_env, 0.02,
               lambda: ScheduledMessage.objects.filter(id__in=ids, topology__name="v2").count() >= 60)
    second = subprocess.run(command, cwd=ROOT, env=worker_env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert event_copies_in(amqp, "v3") == 0
    # (a copy between two levels at the last look, in no queue, stays in v3 and is fanned out there)
    moved = ScheduledMessage.objects.filter(id__in=ids, topology__name="v2")
    assert moved.count() >= len(ids) * 0.9
    assert cascade.FANOUT_QUEUE not in set(moved.values_list("routing_key", flat=True))  # each row on its own
    assert_each_delivered_once_on_time(ids, timeout=90)

"""Copies that name no row are set aside (delivery/orphans.py): one row per copy with what it
carried, its queue's endpoint and team, counted (delay_orphan_copies) once committed; a copy
handed over again counts in times_seen; the export lists them, a team's alone when asked."""

import json
import uuid

import pytest
from prometheus_client import REGISTRY

from scheduling.delivery.orphans import BODY_CAP_BYTES, Carried, orphan_copy_set_aside
from scheduling.delivery.selectors import orphan_copy_count, orphan_copy_list
from scheduling.messages import wire
from scheduling.messages.wire import queue_of_routing_key
from scheduling.models import Endpoint, OrphanCopy, Team

pytestmark = pytest.mark.django_db


def counted(queue: str) -> float:
    return REGISTRY.get_sample_value("delay_orphan_copies_total", {"queue": queue}) or 0.0


@pytest.fixture
def team_endpoint(versions):
    team = Team.objects.create(name=f"t-{uuid.uuid4().hex[:8]}")
    return Endpoint.objects.create(team=team, name="orders", queue=f"{team.name}--orders", topology=versions["v3"])


def copy_of(message_id: str, queue: str, **fields) -> Carried:
    body, headers, _ = wire.deliver_message(message_id, wire.from_epoch_ms(1_900_000_000_000))
    headers |= {wire.H_MESSAGE_ID: message_id, wire.H_DUE_AT_MS: 1_900_000_000_000, wire.H_VERSION: "v3",
                wire.H_PUBLISHED_AT_MS: 1_899_999_990_000}
    return Carried(message_id, fields.pop("attempt", 0), queue, None, headers, body, **fields)


def test_a_copy_with_no_row_is_kept_with_what_it_carried(team_endpoint, django_capture_on_commit_callbacks):
    message_id = str(uuid.uuid4())
    before = counted(team_endpoint.queue)
    with django_capture_on_commit_callbacks(execute=True):
        assert orphan_copy_set_aside(copies=[copy_of(message_id, team_endpoint.queue)], by="w1") == 1
    kept = OrphanCopy.objects.get(message_id=message_id)
    assert (kept.queue, kept.endpoint_id, kept.team_id, kept.attempt) == (
        team_endpoint.queue, team_endpoint.pk, team_endpoint.team_id, 0)
    assert wire.to_epoch_ms(kept.due_at) == 1_900_000_000_000
    assert wire.to_epoch_ms(kept.published_at) == 1_899_999_990_000
    assert (kept.version, kept.task, kept.received_by, kept.times_seen) == ("v3", "scheduling.deliver", "w1", 1)
    assert json.loads(kept.body)[0] == [message_id] and kept.headers[wire.H_MESSAGE_ID] == message_id
    assert counted(team_endpoint.queue) == before + 1


def test_the_same_copy_again_counts_in_times_seen_and_the_metric(team_endpoint, django_capture_on_commit_callbacks):
    message_id = str(uuid.uuid4())
    before = counted(team_endpoint.queue)
    with django_capture_on_commit_callbacks(execute=True):
        first = copy_of(message_id, team_endpoint.queue)
        assert orphan_copy_set_aside(copies=[first, first]) == 1  # twice in one batch: one row
        assert orphan_copy_set_aside(copies=[first]) == 0
        assert orphan_copy_set_aside(copies=[copy_of(message_id, team_endpoint.queue, attempt=2)]) == 1
    rows = OrphanCopy.objects.filter(message_id=message_id).order_by("attempt")
    assert [(r.attempt, r.times_seen) for r in rows] == [(0, 3), (2, 1)]
    assert counted(team_endpoint.queue) == before + 4


def test_a_queue_of_no_endpoint_and_an_oversized_body_are_kept_too():
    message_id = "not-a-uuid"
    orphan_copy_set_aside(copies=[Carried(message_id, 0, "gone--queue", None, {"when": object()},
                                          b"x" * (BODY_CAP_BYTES + 10) + b"\xff")])
    kept = OrphanCopy.objects.get(message_id=message_id)
    assert kept.endpoint_id is None and kept.team_id is None and kept.due_at is None
    assert kept.body.startswith("x" * 100) and kept.body.endswith("bytes, capped)")
    assert isinstance(kept.headers["when"], str)  # AMQP values JSON cannot hold are kept as text
    orphan_copy_set_aside(copies=[Carried("a-task", 0, "t--tasks", body=[("x",), {"n": 1}])])
    assert OrphanCopy.objects.get(message_id="a-task").body == '[["x"], {"n": 1}]'  # a task's arguments as JSON


def test_the_export_lists_them_by_team(team_endpoint, versions):
    other = Team.objects.create(name=f"o-{uuid.uuid4().hex[:8]}")
    other_endpoint = Endpoint.objects.create(team=other, name="x", queue=f"{other.name}--x", topology=versions["v3"])
    mine, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    orphan_copy_set_aside(copies=[copy_of(mine, team_endpoint.queue), copy_of(theirs, other_endpoint.queue)])
    assert orphan_copy_count() == 2
    listed = list(orphan_copy_list(team_id=team_endpoint.team_id))
    assert [(r["message_id"], r["team"], r["endpoint"]) for r in listed] == [(mine, team_endpoint.team.name, "orders")]


@pytest.mark.parametrize(("key", "queue"), [("1.0.1.0.orders", "orders"), ("0.0.0.0.t--a.b", "t--a.b"),
                                            ("t--orders", "t--orders"), ("", "")])
def test_the_queue_a_routing_key_names(key, queue):
    assert queue_of_routing_key(key) == queue


def dropped(queue: str) -> float:
    return REGISTRY.get_sample_value("delay_orphan_copies_dropped_total", {"queue": queue}) or 0.0


def test_a_queue_keeps_at_most_its_bound_and_counts_the_rest(team_endpoint, settings, caplog,
                                                              django_capture_on_commit_callbacks):
    """A flood of made-up ids into one queue: DELAY_ORPHAN_COPIES_MAX_PER_QUEUE rows, the rest acked
    without a row and counted; one warning a batch; a copy already kept still counts in times_seen;
    another queue has its own room."""
    settings.DELAY_ORPHAN_COPIES_MAX_PER_QUEUE = 3
    queue, other = team_endpoint.queue, f"{team_endpoint.team.name}--other"
    before_kept, before_dropped, before_other = counted(queue), dropped(queue), counted(other)
    flood = [copy_of(str(uuid.uuid4()), queue) for _ in range(5)]
    with django_capture_on_commit_callbacks(execute=True), caplog.at_level("WARNING", "scheduling.delivery.orphans"):
        assert orphan_copy_set_aside(copies=flood) == 3
        lines = [r.getMessage() for r in caplog.records if r.name == "scheduling.delivery.orphans"]
        assert len(lines) == 1 and "3 copies naming no row set aside" in lines[0]
        assert "2 acked without a row" in lines[0] and "DELAY_ORPHAN_COPIES_MAX_PER_QUEUE" in lines[0]
        assert orphan_copy_set_aside(copies=[flood[0], copy_of(str(uuid.uuid4()), queue)]) == 0  # again; full
        assert orphan_copy_set_aside(copies=[copy_of(str(uuid.uuid4()), other)]) == 1
    kept = OrphanCopy.objects.filter(queue=queue)
    assert sorted(kept.values_list("message_id", flat=True)) == sorted(c.message_id for c in flood[:3])
    assert kept.get(message_id=flood[0].message_id).times_seen == 2
    assert OrphanCopy.objects.filter(queue=other).count() == 1
    assert (counted(queue) - before_kept, dropped(queue) - before_dropped) == (4, 3)  # 3 + 1 seen again; 2 + 1
    assert counted(other) - before_other == 1 and dropped(other) == 0


def test_the_queue_index_makes_the_bound_a_bounded_count(team_endpoint, settings):
    """The bound's count reads the queue's index, at most the bound's entries, whatever the table holds."""
    from django.db import connection

    settings.DELAY_ORPHAN_COPIES_MAX_PER_QUEUE = 50
    orphan_copy_set_aside(copies=[copy_of(str(uuid.uuid4()), team_endpoint.queue) for _ in range(60)])
    assert OrphanCopy.objects.filter(queue=team_endpoint.queue).count() == 50
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: the planner would scan it, as it should
        cursor.execute("EXPLAIN SELECT count(*) FROM (SELECT 1 FROM scheduling_orphancopy WHERE queue = %s "
                       "LIMIT %s) kept", [team_endpoint.queue, 50])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "orphan_copy_queue" in plan and "Limit" in plan


@pytest.mark.django_db(transaction=True)
def test_two_workers_at_once_take_the_last_room_once(versions, settings):
    """Two set-asides of three new copies each, at once, into a queue with room for four: four rows,
    not six (the lock per queue makes the second count after the first has committed)."""
    import threading

    from django.db import connection

    settings.DELAY_ORPHAN_COPIES_MAX_PER_QUEUE = 4
    queue = f"race-{uuid.uuid4().hex[:8]}--q"
    start, errors = threading.Barrier(2), []

    def worker():
        try:
            start.wait(timeout=10)
            orphan_copy_set_aside(copies=[copy_of(str(uuid.uuid4()), queue) for _ in range(3)])
        except Exception as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    try:
        assert errors == [] and OrphanCopy.objects.filter(queue=queue).count() == 4
    finally:
        OrphanCopy.objects.filter(queue=queue).delete()

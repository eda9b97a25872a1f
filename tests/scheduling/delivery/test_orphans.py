"""Copies that name no row are set aside (delivery/orphans.py): one row per copy with what it
carried, its queue's endpoint and team, counted (delay_orphan_copies) once committed; a copy
handed over again counts in times_seen; the export lists them, a team's alone when asked."""

import json
import uuid

import pytest
from prometheus_client import REGISTRY

from scheduling.delivery.orphans import BODY_CAP_BYTES, Carried, orphan_copy_set_aside
from scheduling.messages.wire import queue_of_routing_key
from scheduling.delivery.selectors import orphan_copy_count, orphan_copy_list
from scheduling.messages import wire
from scheduling.models import Endpoint, OrphanCopy
from scheduling.teams.models import Team

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

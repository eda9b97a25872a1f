"""Ordering's visibility and its upgrade gate in the API (issue 49): ``waiting_for`` on a message's
detail and list rows (one statement a page whatever the number waiting; only its own endpoint's
messages), and DELAY_ORDERING_KEYS off refusing ordering_key (one message, bulk) and overlap
skip/buffer_one with a 400 naming the field and the setting, storing nothing."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.models import Endpoint, Schedule, ScheduledMessage
from scheduling.schedules.services import schedule_create_runs

Status = ScheduledMessage.Status
pytestmark = pytest.mark.django_db


def keyed(endpoint: Endpoint, *, key="k", due_s=0, status=Status.WAITING):
    now = timezone.now()
    return ScheduledMessage.objects.create(
        endpoint=endpoint, topology=endpoint.topology, payload=1, due_at=now + timedelta(seconds=due_s),
        requested_delay_ms=0, status=status, created_at=now, ordering_key=key,
        waiting_since=now if status == Status.WAITING else None)


def test_a_waiting_message_names_what_it_waits_for_in_its_detail_and_the_list(api, endpoint):
    row = Endpoint.objects.get(name=endpoint)
    head = keyed(row, due_s=-3, status=Status.PUBLISHED)
    waiting = keyed(row, due_s=-1)
    detail = api.get(f"/api/messages/{waiting.id}/").json()
    assert detail["status"] == "waiting" and detail["waiting_for"] == str(head.id)
    assert api.get(f"/api/messages/{head.id}/").json()["waiting_for"] is None
    listed = {m["id"]: m["waiting_for"] for m in api.get("/api/messages/").json()["results"]}
    assert listed == {str(head.id): None, str(waiting.id): str(head.id)}


def page_queries(api) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = api.get("/api/messages/", {"status": "waiting"})
    assert response.status_code == 200
    return len(queries.captured_queries)


def test_a_page_costs_one_statement_for_waiting_for_however_many_wait(api, endpoint):
    row = Endpoint.objects.get(name=endpoint)
    heads = [keyed(row, key=f"k{n}", due_s=-9, status=Status.PUBLISHED) for n in range(10)]
    for head in heads[:2]:
        keyed(row, key=head.ordering_key, due_s=-1)
    few = page_queries(api)
    for head in heads[2:]:
        for due in (-2, -1):
            keyed(row, key=head.ordering_key, due_s=due)
    assert page_queries(api) == few  # 2 waiting, then 18: the same statements (no query per row)
    with CaptureQueriesContext(connection) as queries:
        results = api.get("/api/messages/", {"status": "waiting"}).json()["results"]
    assert len(results) == 18 and {r["waiting_for"] for r in results} == {str(h.id) for h in heads}
    assert sum("orderingturn" in (q["sql"] or "") for q in queries.captured_queries) == 1


def test_a_page_with_nothing_waiting_reads_no_turn(api, endpoint):
    row = Endpoint.objects.get(name=endpoint)
    keyed(row, status=Status.PUBLISHED)
    with CaptureQueriesContext(connection) as queries:
        assert api.get("/api/messages/").json()["results"][0]["waiting_for"] is None
    assert not any("orderingturn" in (q["sql"] or "") for q in queries.captured_queries)


def test_it_names_only_its_own_teams_message(teams):
    """Both teams' endpoints are named billing and both use the key k: b's head is due first, yet a's
    waiting message waits for a's head, and a cannot read b's."""
    a, b = (Endpoint.objects.get(name="billing", team__name__startswith=f"t{t}-") for t in ("a", "b"))
    theirs = keyed(b, due_s=-9, status=Status.PUBLISHED)
    ours = keyed(a, due_s=-5, status=Status.PUBLISHED)
    waiting = keyed(a, due_s=-1)
    assert teams["a"].get(f"/api/messages/{waiting.id}/").json()["waiting_for"] == str(ours.id)
    assert teams["a"].get(f"/api/messages/{theirs.id}/").status_code == 404


# --- DELAY_ORDERING_KEYS off: a rolling upgrade -------------------------------------------------------


@pytest.fixture
def ordering_off(settings):
    settings.DELAY_ORDERING_KEYS = False


def test_off_a_key_is_refused_naming_the_field_and_the_setting(api, endpoint, ordering_off):
    one = api.post("/api/messages/", {"endpoint": endpoint, "payload": 1, "delay_seconds": 60,
                                      "ordering_key": "k"}, format="json")
    assert one.status_code == 400, one.content
    assert "DELAY_ORDERING_KEYS" in one.json()["ordering_key"][0], one.json()
    bulk = api.post("/api/messages/bulk/", {"messages": [
        {"endpoint": endpoint, "payload": 1, "delay_seconds": 60},
        {"endpoint": endpoint, "payload": 2, "delay_seconds": 60, "ordering_key": "k"}]}, format="json")
    assert bulk.status_code == 400 and "DELAY_ORDERING_KEYS" in str(bulk.json()), bulk.json()
    assert "ordering_key" in str(bulk.json())
    assert not ScheduledMessage.objects.exists()
    plain = api.post("/api/messages/", {"endpoint": endpoint, "payload": 1, "delay_seconds": 60}, format="json")
    assert plain.status_code == 201  # messages without a key are not touched


def test_on_by_default_the_same_key_is_taken(api, endpoint):
    one = api.post("/api/messages/", {"endpoint": endpoint, "payload": 1, "delay_seconds": 60,
                                      "ordering_key": "k"}, format="json")
    assert one.status_code == 201, one.content


@pytest.mark.parametrize("overlap", ["skip", "buffer_one"])
def test_off_overlap_other_than_allow_is_refused(api, endpoint_row, ordering_off, overlap):
    body = {"key": "every-7s", "endpoint": endpoint_row.name, "payload": 1, "interval_seconds": 7}
    refused = api.post("/api/schedules/", {**body, "overlap": overlap}, format="json")
    assert refused.status_code == 400, refused.content
    assert "DELAY_ORDERING_KEYS" in refused.json()["overlap"][0] and "'allow'" in refused.json()["overlap"][0]
    assert not Schedule.objects.exists()
    assert api.post("/api/schedules/", {**body, "overlap": "allow"}, format="json").status_code == 201


def test_off_a_schedules_own_runs_keep_their_key(api, endpoint_row, settings):
    """A schedule set to skip before the setting went off keeps making keyed runs: the platform's key
    is not a caller's (the gate is at the edges, not the materialiser)."""
    body = {"key": "every-7s", "endpoint": endpoint_row.name, "payload": 1, "interval_seconds": 7, "overlap": "skip"}
    assert api.post("/api/schedules/", body, format="json").status_code == 201
    settings.DELAY_ORDERING_KEYS = False
    before = set(ScheduledMessage.objects.values_list("id", flat=True))
    schedule_create_runs(now=timezone.now() + timedelta(minutes=5))
    made = ScheduledMessage.objects.exclude(id__in=before)
    assert made.exists() and set(made.values_list("ordering_key", flat=True)) == {"schedule:every-7s"}

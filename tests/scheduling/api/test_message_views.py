"""The messages' API (/api/messages/): permissions, validation (400 naming the field, nothing
stored), scheduling one or in bulk, the list by cursor, reschedule, and bulk actions by filter run
as jobs (/api/bulk-actions/), in the shapes docs/reference/api.md and docs/guides/scheduling.md
document."""

import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.models import Endpoint, ScheduledMessage
from tests.scheduling.messages.test_selectors import assert_no_exact_count

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
Status = ScheduledMessage.Status


def test_permissions_are_the_role_in_the_team_and_the_key_s_scopes(api_as, team_key, platform, endpoint):
    reader = api_as("viewer")
    assert reader.get("/api/endpoints/").status_code == 200
    assert reader.post("/api/endpoints/", {"name": "x"}, format="json").status_code == 403
    assert reader.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 1},
                       format="json").status_code == 403
    nobody = api_as()  # in no team: sees nothing, may do nothing
    assert nobody.get("/api/messages/").status_code == 403
    member = api_as("member")
    created = member.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 60},
                          format="json")
    assert created.status_code == 201
    assert member.post("/api/endpoints/", {"name": "x"}, format="json").status_code == 403
    writer = team_key("default", "read", "write")  # a key may schedule but not cancel
    assert writer.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 60},
                       format="json").status_code == 201
    assert writer.post(f"/api/messages/{created.json()['id']}/cancel/").status_code == 403
    assert team_key("default", "read").post("/api/messages/", {"endpoint": endpoint, "payload": {}},
                                            format="json").status_code == 403
    assert set(ScheduledMessage.objects.values_list("status", flat=True)) == {Status.PUBLISHED}
    assert member.post(f"/api/messages/{created.json()['id']}/cancel/").status_code == 200


def test_schedule_watch_and_cancel(api, endpoint):
    created = api.post("/api/messages/", {"endpoint": endpoint, "payload": {"order": 42}, "delay_seconds": 10.25},
                       format="json")
    assert created.status_code == 201
    body = created.json()
    assert {"id", "status", "due_at", "routing_key", "topology"} <= set(body)
    assert (body["status"], body["topology"], body["requested_delay_ms"]) == ("published", "v3", 10250)
    detail = api.get(f"/api/messages/{body['id']}/").json()
    assert {"delivered_at", "lateness_ms", "delivery_count"} <= set(detail) and detail["payload"] == {"order": 42}
    assert api.post(f"/api/messages/{body['id']}/cancel/").json() == {"id": body["id"], "status": "cancelled"}
    ScheduledMessage.objects.filter(id=body["id"]).update(status=Status.DELIVERED)
    conflict = api.post(f"/api/messages/{body['id']}/cancel/")
    assert conflict.status_code == 409 and "already delivered" in conflict.json()["detail"]
    assert api.post(f"/api/messages/{uuid.uuid4()}/cancel/").status_code == 404
    assert api.get(f"/api/messages/{uuid.uuid4()}/").status_code == 404


def test_deliver_at_with_milliseconds(api, endpoint):
    body = {"endpoint": endpoint, "payload": [], "deliver_at": "2030-11-21T12:00:00.250Z"}
    response = api.post("/api/messages/", body, format="json")
    assert response.status_code == 201 and response.json()["due_at"] == "2030-11-21T12:00:00.250000Z"


@pytest.mark.parametrize(("when", "in_past"), [
    ({"deliver_at": "2020-01-01T00:00:00Z"}, True), ({"delay_seconds": 0}, False), ({"delay_seconds": 5}, False),
])
def test_a_message_asked_for_in_the_past_says_so_and_keeps_its_requested_time(api, endpoint, when, in_past):
    created = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, **when}, format="json")
    assert created.status_code == 201, created.content
    detail = api.get(f"/api/messages/{created.json()['id']}/").json()
    assert detail["scheduled_in_past"] is in_past
    if in_past:
        assert detail["due_at"] == "2020-01-01T00:00:00Z" and detail["requested_delay_ms"] == 0


def test_idempotency_key_returns_the_same_message(api, endpoint):
    body = {"endpoint": endpoint, "payload": {}, "delay_seconds": 5, "idempotency_key": "k-1"}
    first, again = (api.post("/api/messages/", body, format="json") for _ in range(2))
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"] and ScheduledMessage.objects.count() == 1


@pytest.mark.parametrize(
    ("changes", "field", "text"),
    [({"delay_seconds": -1}, "delay_seconds", "must not be negative"),
     ({"delay_seconds": 268435456}, "delay_seconds", "maximum delay of 268,435,455 s"),
     ({"delay_seconds": None}, "delay_seconds", "exactly one"),
     ({"deliver_at": "2030-01-01T00:00:00Z"}, "delay_seconds", "exactly one"),
     ({"delay_seconds": "NaN"}, "delay_seconds", "valid number"),
     ({"endpoint": "ghost"}, "endpoint", "unknown endpoint"),
     ({"endpoint": "a.b"}, "endpoint", "unknown endpoint"),
     ({"payload": "x" * 262_143}, "payload", "limit is 262,144"),
     ({"idempotency_key": "k" * 256}, "idempotency_key", "255"),
     ({"payload": None}, "payload", "null"),
     ({"payload": {"text": "nul\u0000"}}, "payload", "NUL")],
)
def test_bad_message_is_400_naming_the_field_and_stores_nothing(api, endpoint, changes, field, text):
    body = {"endpoint": endpoint, "payload": {"a": 1}, "delay_seconds": 1, **changes}
    response = api.post("/api/messages/", body, format="json")
    assert response.status_code == 400
    assert text in " ".join(response.json()[field]), response.json()
    assert not ScheduledMessage.objects.exists()


@pytest.mark.parametrize("key", ["schedule:nightly:1:1767225600000", "schedule:"])
def test_the_schedule_key_namespace_is_the_platform_s_single_and_bulk(api, endpoint, key):
    """A run of a schedule is found by its key: a caller's message under it would be taken for the run."""
    body = {"endpoint": endpoint, "payload": {"a": 1}, "delay_seconds": 1, "idempotency_key": key}
    single = api.post("/api/messages/", body, format="json")
    assert single.status_code == 400 and "platform's" in single.json()["idempotency_key"][0], single.json()
    bulk = api.post("/api/messages/bulk/", {"messages": [{**body, "idempotency_key": "fine"}, body]}, format="json")
    assert bulk.status_code == 400 and "idempotency_key" in str(bulk.json()), bulk.json()
    assert not ScheduledMessage.objects.exists()
    assert api.post("/api/messages/", {**body, "idempotency_key": "my-schedule:1"}, format="json").status_code == 201


def test_missing_payload_and_unparseable_body(api, endpoint):
    response = api.post("/api/messages/", {"endpoint": endpoint, "delay_seconds": 1}, format="json")
    assert response.status_code == 400 and "payload" in response.json()
    response = api.post("/api/messages/", "{not json", content_type="application/json")
    assert response.status_code == 400 and "JSON parse error" in response.json()["detail"]
    assert not ScheduledMessage.objects.exists()


def test_inactive_endpoint_is_refused(api, endpoint):
    Endpoint.objects.filter(name=endpoint).update(is_active=False)
    response = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 1}, format="json")
    assert response.status_code == 400 and "inactive" in response.json()["endpoint"][0]


def test_bulk_all_or_nothing(api, endpoint):
    messages = [{"endpoint": endpoint, "payload": {"i": i}, "delay_seconds": i} for i in range(3)]
    created = api.post("/api/messages/bulk/", {"messages": messages}, format="json")
    assert created.status_code == 201
    answered = created.json()["messages"]
    assert {"id", "status", "due_at", "routing_key", "topology", "endpoint"} <= set(answered[0])
    stored = {str(m.id): m.payload["i"] for m in ScheduledMessage.objects.all()}
    assert [stored[m["id"]] for m in answered] == [0, 1, 2]  # in the order given
    bad = [*messages, {"endpoint": endpoint, "payload": {}, "delay_seconds": -3}]
    response = api.post("/api/messages/bulk/", {"messages": bad}, format="json")
    assert response.status_code == 400
    assert response.json()["messages"][:3] == [{}, {}, {}]
    assert "must not be negative" in response.json()["messages"][3]["delay_seconds"][0]
    assert ScheduledMessage.objects.count() == 3


def test_bulk_limits(api, endpoint):
    one = {"endpoint": endpoint, "payload": 1, "delay_seconds": 1}
    assert api.post("/api/messages/bulk/", {"messages": [one] * 1000}, format="json").status_code == 201
    response = api.post("/api/messages/bulk/", {"messages": [one] * 1001}, format="json")
    assert response.status_code == 400 and "no more than 1000" in str(response.json()["messages"])
    response = api.post("/api/messages/bulk/", {"messages": []}, format="json")
    assert response.status_code == 400 and "messages" in response.json()
    assert ScheduledMessage.objects.count() == 1000


def test_list_filters_and_pages_by_cursor_every_message_once(api, endpoint, versions):
    """A bulk request's 60 messages share their created_at: the id orders them, and following
    next then previous gives each exactly once, newest first. No count: none is asked."""
    api.post("/api/messages/bulk/", {"messages": [{"endpoint": endpoint, "payload": i, "delay_seconds": 9}
                                                  for i in range(60)]}, format="json")
    ScheduledMessage.objects.filter(payload__in=[0, 1]).update(status=Status.CANCELLED)
    expected = [str(i) for i in ScheduledMessage.objects.order_by("-created_at", "-id").values_list("id", flat=True)]
    with CaptureQueriesContext(connection) as captured:
        page = api.get("/api/messages/", {"endpoint": endpoint}).json()
    assert_no_exact_count(captured.captured_queries)
    assert set(page) == {"next", "previous", "results"} and page["previous"] is None
    assert [m["id"] for m in page["results"]] == expected[:50] and "cursor=" in page["next"]
    last = api.get(page["next"]).json()
    assert [m["id"] for m in last["results"]] == expected[50:] and last["next"] is None
    assert [m["id"] for m in api.get(last["previous"]).json()["results"]] == expected[:50]
    assert len(api.get("/api/messages/", {"endpoint": endpoint, "status": "cancelled"}).json()["results"]) == 2
    assert api.get("/api/messages/", {"endpoint": "other"}).json() == {"next": None, "previous": None, "results": []}
    unreadable = api.get("/api/messages/", {"endpoint": endpoint, "cursor": "not-a-cursor"})
    assert unreadable.status_code == 400 and set(unreadable.json()) == {"cursor"}  # no longer the first page
    answer = api.get(f"/api/endpoints/{endpoint}/").json()
    assert answer["message_counts"] == {"pending": 0, "published": 58, "delivered": 0, "cancelled": 2, "failed": 0,
                                        "expired": 0, "superseded": 0, "waiting": 0, "skipped": 0}
    assert answer["message_counts_estimated"] == []


def test_bulk_limit_is_the_setting(api, endpoint, settings):
    settings.DELAY_BULK_MAX = 5
    one = {"endpoint": endpoint, "payload": 1, "delay_seconds": 1}
    response = api.post("/api/messages/bulk/", {"messages": [one] * 6}, format="json")
    assert response.status_code == 400 and "no more than 5" in str(response.json()["messages"])
    assert ScheduledMessage.objects.count() == 0
    assert api.post("/api/messages/bulk/", {"messages": [one] * 5}, format="json").status_code == 201


def test_patch_reschedules_a_message_and_says_why_not(api, api_as, endpoint):
    created = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 60}, format="json")
    message_id = created.json()["id"]
    moved = api.patch(f"/api/messages/{message_id}/", {"deliver_at": "2030-11-21T12:00:00.250Z"}, format="json")
    assert moved.status_code == 200, moved.content
    body = moved.json()
    assert (body["id"], body["status"], body["due_at"]) == (message_id, "pending", "2030-11-21T12:00:00.250000Z")
    def instant(text):
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    assert [instant(h["due_at"]) for h in body["due_history"]] == [instant(created.json()["due_at"])]
    bad = api.patch(f"/api/messages/{message_id}/", {"delay_seconds": 1, "deliver_at": "2030-01-01T00:00:00Z"},
                    format="json")
    assert bad.status_code == 400 and "exactly one" in bad.json()["delay_seconds"][0]
    assert api.patch(f"/api/messages/{message_id}/", {"delay_seconds": "x"}, format="json").status_code == 400
    ScheduledMessage.objects.filter(id=message_id).update(status=Status.DELIVERED)
    conflict = api.patch(f"/api/messages/{message_id}/", {"delay_seconds": 5}, format="json")
    assert conflict.status_code == 409 and "already delivered" in conflict.json()["detail"]
    assert api.patch(f"/api/messages/{uuid.uuid4()}/", {"delay_seconds": 5}, format="json").status_code == 404
    reader = api_as("viewer")
    assert reader.patch(f"/api/messages/{message_id}/", {"delay_seconds": 5}, format="json").status_code == 403


def run_bulk_job(api, body: dict, capture) -> dict:
    """POST a bulk cancel or republish: it answers 202 with the job, having changed nothing yet and
    handed the job to a worker once its transaction commits; the job run here as the worker's task
    would run it (no worker in these tests); then its status URL, which says it is done."""
    from scheduling.celery.tasks import apply_bulk_action

    path = body.pop("path")
    with capture(execute=False) as callbacks:
        started = api.post(path, body, format="json")
    assert started.status_code == 202, started.content
    job = started.json()
    assert job["state"] == "running" and job["done"] == 0 and job["count"] == job["matched"]
    assert started["Location"] == job["status_url"] and job["status_url"].endswith(f"/api/bulk-actions/{job['id']}/")
    assert len(callbacks) == 1
    apply_bulk_action(job["id"])
    status = api.get(job["status_url"])
    assert status.status_code == 200 and status.json()["state"] == "done"
    return status.json()


def test_a_bulk_dry_run_counts_no_further_than_its_cap(api, endpoint, monkeypatch):
    monkeypatch.setattr("scheduling.api.message_views.DRY_RUN_COUNT_CAP", 2)
    for delay in (30, 60, 90):
        api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": delay}, format="json")
    dry = api.post("/api/messages/cancel/", {"endpoint": endpoint, "dry_run": True}, format="json")
    assert dry.status_code == 200 and dry.json() == {"count": 2, "exact": False}  # more than 2
    monkeypatch.setattr("scheduling.api.message_views.DRY_RUN_COUNT_CAP", 3)
    assert api.post("/api/messages/cancel/", {"endpoint": endpoint, "dry_run": True}, format="json").json() == \
        {"count": 3, "exact": True}


def test_bulk_cancel_and_republish_by_filter_run_as_a_job(api, api_as, endpoint, django_capture_on_commit_callbacks):
    ids = [api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": d}, format="json")
           .json()["id"] for d in (30, 60, 7200)]
    soon = {"endpoint": endpoint, "due_before": (datetime.now(dt_timezone.utc) + timedelta(minutes=5)).isoformat()}
    dry = api.post("/api/messages/cancel/", {**soon, "dry_run": True}, format="json")
    assert dry.status_code == 200 and dry.json() == {"count": 2, "exact": True}
    assert set(ScheduledMessage.objects.values_list("status", flat=True)) == {Status.PUBLISHED}
    done = run_bulk_job(api, {"path": "/api/messages/cancel/", **soon}, django_capture_on_commit_callbacks)
    assert (done["kind"], done["count"], done["done"]) == ("cancel", 2, 2)
    assert dict(ScheduledMessage.objects.values_list("id", "status")) == {
        uuid.UUID(ids[0]): Status.CANCELLED, uuid.UUID(ids[1]): Status.CANCELLED, uuid.UUID(ids[2]): Status.PUBLISHED}
    ScheduledMessage.objects.filter(id=ids[2]).update(status=Status.FAILED)
    done = run_bulk_job(api, {"path": "/api/messages/republish/", "endpoint": endpoint},
                        django_capture_on_commit_callbacks)
    assert (done["kind"], done["done"]) == ("republish", 1)
    assert ScheduledMessage.objects.get(id=ids[2]).status == Status.PENDING
    bad = api.post("/api/messages/cancel/", {"dry_run": True}, format="json")
    assert bad.status_code == 400 and "at least one filter" in bad.json()["non_field_errors"][0]
    assert api.post("/api/messages/cancel/", {"due_before": "soon"}, format="json").status_code == 400
    viewer = api_as("viewer")
    assert viewer.post("/api/messages/cancel/", soon, format="json").status_code == 403


@pytest.mark.parametrize("job_id", ["999999", "not-a-number", "9" * 40, "00000000-0000-0000-0000-000000000000"])
def test_an_unknown_bulk_job_is_a_404(api, job_id):
    assert api.get(f"/api/bulk-actions/{job_id}/").status_code == 404

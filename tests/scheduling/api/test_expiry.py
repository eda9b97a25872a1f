"""Expiry through the API (issue 49): ``expires_at`` or ``expire_after_seconds`` on POST
/api/messages/ and its bulk form, each 400 naming the field and the reason (nothing stored), the
row's expires_at kept by a reschedule or the reschedule refused, and the status filter's new
final statuses."""

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest

from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.django_db, pytest.mark.broker]


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_expire_after_seconds_counts_from_the_due_time(api, endpoint):
    created = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "deliver_at": "2030-01-01T00:00:00Z",
                                          "expire_after_seconds": "3600.5"}, format="json")
    assert created.status_code == 201, created.content
    row = ScheduledMessage.objects.get(id=created.json()["id"])
    assert row.expires_at == datetime(2030, 1, 1, 1, 0, 0, 500000, tzinfo=dt_timezone.utc)
    shown = api.get(f"/api/messages/{row.id}/").json()
    assert instant(shown["expires_at"]) == row.expires_at


def test_expires_at_is_kept_as_given_and_none_means_never(api, endpoint):
    created = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "deliver_at": "2030-01-01T00:00:00Z",
                                          "expires_at": "2030-01-01T00:00:01.250Z"}, format="json")
    assert created.status_code == 201, created.content
    assert ScheduledMessage.objects.get(id=created.json()["id"]).expires_at == datetime(
        2030, 1, 1, 0, 0, 1, 250000, tzinfo=dt_timezone.utc)
    plain = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 5}, format="json")
    assert plain.status_code == 201 and plain.json().get("expires_at") is None
    assert ScheduledMessage.objects.get(id=plain.json()["id"]).expires_at is None


@pytest.mark.parametrize(("fields", "named", "reason"), [
    ({"expires_at": "2030-01-01T01:00:00Z", "expire_after_seconds": 60}, {"expires_at", "expire_after_seconds"},
     "not both"),
    ({"expires_at": "2030-01-01T00:00:00Z"}, {"expires_at"}, "must be after the due time"),
    ({"expires_at": "2029-12-31T23:00:00Z"}, {"expires_at"}, "must be after the due time"),
    ({"expire_after_seconds": 0}, {"expire_after_seconds"}, "more than 0"),
    ({"expire_after_seconds": -5}, {"expire_after_seconds"}, "more than 0"),
    ({"expire_after_seconds": 10 ** 12}, {"expire_after_seconds"}, "maximum"),
    ({"expires_at": "2090-01-01T00:00:00Z"}, {"expires_at"}, "maximum"),
    ({"expire_after_seconds": "soon"}, {"expire_after_seconds"}, "number"),
])
def test_a_bad_expiry_is_a_400_naming_the_field_and_nothing_is_stored(api, endpoint, fields, named, reason):
    before = ScheduledMessage.objects.count()
    response = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "deliver_at": "2030-01-01T00:00:00Z",
                                           **fields}, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert named <= set(body), body
    assert any(reason in text for field in named for text in body[field]), body
    assert ScheduledMessage.objects.count() == before


def test_bulk_takes_an_expiry_per_message_and_names_the_bad_one(api, endpoint):
    ok = api.post("/api/messages/bulk/", {"messages": [
        {"endpoint": endpoint, "payload": {}, "deliver_at": "2030-01-01T00:00:00Z", "expire_after_seconds": 60},
        {"endpoint": endpoint, "payload": {}, "delay_seconds": 1}]}, format="json")
    assert ok.status_code == 201, ok.content
    ids = [m["id"] for m in ok.json()["messages"]]
    rows = {str(r.id): r.expires_at for r in ScheduledMessage.objects.filter(id__in=ids)}
    assert rows[ids[0]] == datetime(2030, 1, 1, 0, 1, tzinfo=dt_timezone.utc) and rows[ids[1]] is None
    bad = api.post("/api/messages/bulk/", {"messages": [
        {"endpoint": endpoint, "payload": {}, "delay_seconds": 1},
        {"endpoint": endpoint, "payload": {}, "deliver_at": "2030-01-01T00:00:00Z",
         "expires_at": "2029-01-01T00:00:00Z"}]}, format="json")
    assert bad.status_code == 400 and "expires_at" in str(bad.json())


def test_a_reschedule_keeps_the_expiry_while_it_is_after_the_new_due_time_else_400(api, endpoint):
    created = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "deliver_at": "2030-01-01T00:00:00Z",
                                          "expires_at": "2030-01-01T01:00:00Z"}, format="json")
    message_id = created.json()["id"]
    moved = api.patch(f"/api/messages/{message_id}/", {"deliver_at": "2030-01-01T00:30:00Z"}, format="json")
    assert moved.status_code == 200, moved.content
    assert instant(moved.json()["expires_at"]) == datetime(2030, 1, 1, 1, tzinfo=dt_timezone.utc)
    late = api.patch(f"/api/messages/{message_id}/", {"deliver_at": "2030-01-01T01:00:00Z"}, format="json")
    assert late.status_code == 400 and "expires_at" in late.json()["deliver_at"][0]
    row = ScheduledMessage.objects.get(id=message_id)
    assert row.due_at == datetime(2030, 1, 1, 0, 30, tzinfo=dt_timezone.utc)  # the refused move changed nothing


@pytest.mark.parametrize("status", ["expired", "superseded"])
def test_the_list_filters_by_the_new_final_statuses(api, endpoint, status):
    created = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 60}, format="json")
    other = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 60}, format="json")
    ScheduledMessage.objects.filter(id=created.json()["id"]).update(
        status=status, finished_at=datetime.now(dt_timezone.utc) - timedelta(seconds=1))
    listed = api.get("/api/messages/", {"endpoint": endpoint, "status": status})
    assert listed.status_code == 200
    assert [m["id"] for m in listed.json()["results"]] == [created.json()["id"]]
    assert other.json()["id"] not in str(api.get("/api/messages/", {"status": status}).json())

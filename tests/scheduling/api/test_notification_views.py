"""/api/notifications/ (routes) and the callbacks of /api/messages/: 201s and their shape, 400s naming
the field (an unknown type, another team's endpoint, a Celery queue), team isolation (another team's
route is a 404), the endpoints scope, cursor pages, the audit log."""

import uuid

import pytest

from scheduling.api.notification_views import RouteCursorPagination
from scheduling.models import AuditEvent, ScheduledMessage
from scheduling.models.notifications import ROUTABLE

pytestmark = pytest.mark.django_db


def route(client, endpoint="billing", events=("message.failed",), **more):
    return client.post("/api/notifications/", {"endpoint": endpoint, "events": list(events), **more}, format="json")


def test_a_route_is_made_read_listed_and_deleted_with_the_audit_log(teams):
    a = teams["a"]
    made = route(a, events=["message.failed", "endpoint.disabled"])
    assert made.status_code == 201, made.content
    data = made.json()
    assert set(data) == {"id", "team", "endpoint", "events", "created_at"}
    assert data["endpoint"] == "billing" and data["events"] == ["message.failed", "endpoint.disabled"]
    assert a.get(f"/api/notifications/{data['id']}/").json() == data
    assert [r["id"] for r in a.get("/api/notifications/").json()["results"]] == [data["id"]]
    assert a.delete(f"/api/notifications/{data['id']}/").status_code == 204
    assert a.get(f"/api/notifications/{data['id']}/").status_code == 404
    assert list(AuditEvent.objects.filter(object_id=data["id"]).order_by("id").values_list("action", flat=True)) \
        == ["notification_route.create", "notification_route.delete"]


def test_400s_name_the_field_and_the_reason(teams):
    a = teams["a"]
    unknown = route(a, events=["message.failed", "message.exploded"])
    assert unknown.status_code == 400 and "message.exploded" in str(unknown.json()["events"])
    assert route(a, events=[]).status_code == 400
    assert route(a, events=["message.delivered"]).status_code == 400  # a callback's type, not a route's
    too_many = route(a, events=["message.failed"] * (len(ROUTABLE) + 1))  # more items than there are types
    assert too_many.status_code == 400 and "events" in too_many.json()
    missing = route(a, endpoint="nope")
    assert missing.status_code == 400 and "nope" in str(missing.json()["endpoint"])
    assert route(a).status_code == 201
    again = route(a)
    assert again.status_code == 400 and "already" in str(again.json()["endpoint"])
    tasks = a.post("/api/endpoints/", {"name": "tasks", "handler": "celery_queue"}, format="json")
    assert tasks.status_code == 201, tasks.content
    assert "Celery" in str(route(a, endpoint="tasks").json()["endpoint"])


def test_another_teams_routes_and_endpoints_are_out_of_reach(teams):
    a, b = teams["a"], teams["b"]
    b_route = route(b).json()["id"]
    assert a.get(f"/api/notifications/{b_route}/").status_code == 404
    assert a.delete(f"/api/notifications/{b_route}/").status_code == 404
    assert a.get("/api/notifications/").json()["results"] == []
    assert a.get("/api/notifications/not-a-uuid/").status_code == 404
    b_team = b.get("/api/teams/").json()["results"][0]["name"]
    assert route(a, team=b_team).status_code == 400  # a team that is not the caller's


def test_routes_need_the_endpoints_scope_to_change_and_read_to_list(teams, team_key):
    a = teams["a"]
    team = a.get("/api/teams/").json()["results"][0]["name"]
    reader = team_key(team, "read")
    assert route(reader).status_code == 403
    made = route(a).json()["id"]
    assert reader.get(f"/api/notifications/{made}/").status_code == 200
    assert reader.delete(f"/api/notifications/{made}/").status_code == 403


def test_the_list_pages_by_cursor_newest_first(teams, monkeypatch):
    monkeypatch.setattr(RouteCursorPagination, "page_size", 2)
    a = teams["a"]
    for n in range(3):
        assert a.post("/api/endpoints/", {"name": f"n{n}"}, format="json").status_code == 201
        assert route(a, endpoint=f"n{n}").status_code == 201
    first = a.get("/api/notifications/").json()
    assert [r["endpoint"] for r in first["results"]] == ["n2", "n1"] and "cursor=" in first["next"]
    second = a.get(first["next"]).json()
    assert [r["endpoint"] for r in second["results"]] == ["n0"] and second["next"] is None


def test_a_message_takes_its_callbacks_by_name_in_its_team(teams):
    a, b = teams["a"], teams["b"]
    assert a.post("/api/endpoints/", {"name": "outcomes"}, format="json").status_code == 201
    made = a.post("/api/messages/", {"endpoint": "billing", "payload": {"n": 1}, "delay_seconds": 60,
                                     "on_delivered": "outcomes", "on_failed": "billing"}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["on_delivered"] == "outcomes" and made.json()["on_failed"] == "billing"
    assert made.json()["notification"] is None
    row = ScheduledMessage.objects.get(pk=made.json()["id"])
    assert row.on_delivered.name == "outcomes" and row.on_failed.name == "billing"
    assert a.get(f"/api/messages/{row.pk}/").json()["on_delivered"] == "outcomes"
    theirs = f"only-b-{uuid.uuid4().hex[:4]}"  # team b's alone
    assert b.post("/api/endpoints/", {"name": theirs}, format="json").status_code == 201
    refused = a.post("/api/messages/", {"endpoint": "billing", "payload": {"n": 1}, "delay_seconds": 60,
                                        "on_failed": theirs}, format="json")
    assert refused.status_code == 400 and theirs in str(refused.json()["on_failed"])
    bulk = a.post("/api/messages/bulk/", {"messages": [
        {"endpoint": "billing", "payload": {"n": 2}, "delay_seconds": 60, "on_delivered": "outcomes"},
        {"endpoint": "billing", "payload": {"n": 3}, "delay_seconds": 60, "on_delivered": "ghost"}]}, format="json")
    assert bulk.status_code == 400 and "on_delivered" in str(bulk.json())
    bulk = a.post("/api/messages/bulk/", {"messages": [
        {"endpoint": "billing", "payload": {"n": 2}, "delay_seconds": 60, "on_delivered": "outcomes"}]},
        format="json")
    assert bulk.status_code == 201
    assert ScheduledMessage.objects.get(pk=bulk.json()["messages"][0]["id"]).on_delivered.name == "outcomes"

"""A message's attempts and its resend, through the API: GET /api/messages/<id>/attempts/ lists
the attempts the delivery engine kept (oldest first, paged by cursor) to the message's team only;
POST /api/messages/<id>/resend/ sends a delivered message again, published for real after the
commit, as a person's (trigger manual). Attempt rows are made directly: writing them is the
engine's, tested with it."""

import base64
import uuid
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.utils import timezone

from harness.waiting import wait_until
from scheduling.api.pagination import AttemptCursorPagination
from scheduling.models import AuditEvent, Endpoint, MessageAttempt, ScheduledMessage

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
Status = ScheduledMessage.Status
FIELDS = {"number", "trigger", "started_at", "duration_ms", "outcome", "status_code", "excerpt", "worker"}


def delivered(key, **fields) -> ScheduledMessage:
    """A message of the key's team scheduled through the API, then marked delivered a second after
    its due time (as the engine would after its call). Its copy stays in the cascade, an hour
    away: nothing of it reaches the endpoint's queue but what a resend publishes."""
    response = key.post("/api/messages/", {"endpoint": "billing", "payload": {"n": 1}, "delay_seconds": 3600},
                        format="json")
    assert response.status_code == 201, response.content
    now = timezone.now()
    ScheduledMessage.objects.filter(id=response.json()["id"]).update(
        status=Status.DELIVERED, due_at=now - timedelta(seconds=1), delivered_at=now, lateness_ms=1000,
        finished_at=now, delivery_count=1, **fields)
    return ScheduledMessage.objects.get(id=response.json()["id"])


def attempt(message, *, seconds_ago: float, number: int = 1, **fields) -> MessageAttempt:
    values = {"trigger": "scheduled", "duration_ms": 120, "outcome": "http_status", "status_code": 503,
              "excerpt": "busy", "worker": "w1@host", **fields}
    return MessageAttempt.objects.create(message=message, number=number,
                                         started_at=timezone.now() - timedelta(seconds=seconds_ago), **values)


def test_attempts_are_listed_oldest_first_with_their_fields(teams):
    a = teams["a"]
    message = delivered(a)
    # written out of order: the list follows started_at, not the order the rows were made in
    second = attempt(message, seconds_ago=5, number=2, trigger="retry", outcome="ok", status_code=200,
                     excerpt='{"ok": true}', duration_ms=40, worker="w2@host")
    first = attempt(message, seconds_ago=20, number=1, outcome="timeout", status_code=None, excerpt="deadline 5 s")
    attempt(delivered(a), seconds_ago=1, excerpt="another message's")

    response = a.get(f"/api/messages/{message.id}/attempts/")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["next"] is None and body["previous"] is None
    results = body["results"]
    assert [set(r) for r in results] == [FIELDS, FIELDS]
    assert [(r["number"], r["trigger"], r["outcome"], r["status_code"], r["excerpt"]) for r in results] == [
        (1, "scheduled", "timeout", None, "deadline 5 s"), (2, "retry", "ok", 200, '{"ok": true}')]
    assert results[1]["duration_ms"] == 40 and results[1]["worker"] == "w2@host"
    assert results[0]["started_at"] == first.started_at.isoformat().replace("+00:00", "Z")
    assert results[1]["started_at"] == second.started_at.isoformat().replace("+00:00", "Z")
    assert a.get(f"/api/messages/{delivered(a).id}/attempts/").json()["results"] == []  # none yet: empty


def test_another_team_s_message_attempts_are_a_404_and_a_viewer_reads_its_own(teams, api_as):
    a, b = teams["a"], teams["b"]
    message = delivered(a)
    attempt(message, seconds_ago=1, excerpt="a's receiver said this")
    response = b.get(f"/api/messages/{message.id}/attempts/")
    assert response.status_code == 404 and "a's receiver" not in response.content.decode()
    assert b.get(f"/api/messages/{uuid.uuid4()}/attempts/").status_code == 404
    assert b.get("/api/messages/not-a-uuid/attempts/").status_code == 404
    viewer = api_as("viewer", team=a.key.row.team.name)
    assert [r["excerpt"] for r in viewer.get(f"/api/messages/{message.id}/attempts/").json()["results"]] == [
        "a's receiver said this"]
    assert api_as().get(f"/api/messages/{message.id}/attempts/").status_code == 403  # in no team


def test_attempts_page_by_cursor_every_one_once_and_a_forged_cursor_is_a_400(teams, monkeypatch):
    a = teams["a"]
    message = delivered(a)
    made = [attempt(message, seconds_ago=100 - i, number=i + 1) for i in range(5)]
    made.append(attempt(message, seconds_ago=100 - 4, number=6))  # the same started_at as the 5th: a tie
    monkeypatch.setattr(AttemptCursorPagination, "page_size", 2)
    seen, url, pages = [], f"/api/messages/{message.id}/attempts/", 0
    while url:
        body = a.get(url).json()
        seen += [r["number"] for r in body["results"]]
        url, pages = body["next"], pages + 1
    assert seen == [1, 2, 3, 4, 5, 6] and pages == 3
    for cursor in ("garbage", base64.b64encode(b"o=0&r=0&p=not-a-time").decode()):
        response = a.get(f"/api/messages/{message.id}/attempts/?cursor={quote(cursor)}")
        assert response.status_code == 400 and list(response.json()) == ["cursor"], response.content


def test_resend_sends_a_delivered_message_again_as_a_manual_attempt(teams, django_capture_on_commit_callbacks, amqp):
    a = teams["a"]
    message = delivered(a, attempts=1)
    attempt(message, seconds_ago=10, outcome="ok", status_code=200)

    def in_its_queue():
        with amqp.reader(message.endpoint.queue) as reader:  # unacked: they go back when it closes
            return any(str(message.id) in m.body for m in reader.get(50))

    assert not in_its_queue()
    with django_capture_on_commit_callbacks(execute=True):  # published after the commit, as in a request
        response = a.post(f"/api/messages/{message.id}/resend/")

    assert response.status_code == 200, response.content
    assert response.json() == {"id": str(message.id), "status": "pending"}
    row = ScheduledMessage.objects.get(id=message.id)
    assert (row.status, row.trigger, row.attempts, row.delivered_at, row.finished_at) == (
        Status.PUBLISHED, "manual", 0, None, None)
    assert row.published_at is not None and row.routing_key  # the broker confirmed it
    wait_until(in_its_queue, 10, message="the resent copy in the endpoint's queue")  # overdue: straight there
    assert [r["number"] for r in a.get(f"/api/messages/{message.id}/attempts/").json()["results"]] == [1]  # kept
    event = AuditEvent.objects.get(action="message.resend")
    assert (event.object_id, event.team_name, event.before, event.after) == (
        str(message.id), a.key.row.team.name, {"status": "delivered"}, {"status": "pending"})


def test_resend_is_a_409_for_a_message_in_flight_or_a_celery_task(teams, api, platform, endpoint_name, amqp):
    a = teams["a"]
    pending = a.post("/api/messages/", {"endpoint": "billing", "payload": {}, "delay_seconds": 600},
                     format="json").json()["id"]
    response = a.post(f"/api/messages/{pending}/resend/")
    assert response.status_code == 409 and "only delivered or failed" in response.json()["detail"]
    assert ScheduledMessage.objects.get(id=pending).status == Status.PUBLISHED

    tasks = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=platform["v3"],
                                    handler=Endpoint.Handler.CELERY_QUEUE)
    task = ScheduledMessage.objects.create(endpoint=tasks, topology=tasks.topology, status=Status.DELIVERED,
                                           payload={"task": "testapp.add", "args": [1, 2]}, due_at=timezone.now(),
                                           requested_delay_ms=0)
    response = api.post(f"/api/messages/{task.id}/resend/")
    assert response.status_code == 409 and "Celery task" in response.json()["detail"]
    assert ScheduledMessage.objects.get(id=task.id).status == Status.DELIVERED
    assert not AuditEvent.objects.filter(action="message.resend").exists()


def test_resend_needs_the_cancel_right_and_another_team_s_is_a_404(teams, api_as):
    a, b = teams["a"], teams["b"]
    message = delivered(a)
    assert b.post(f"/api/messages/{message.id}/resend/").status_code == 404
    viewer = api_as("viewer", team=a.key.row.team.name)
    assert viewer.post(f"/api/messages/{message.id}/resend/").status_code == 403
    assert ScheduledMessage.objects.get(id=message.id).status == Status.DELIVERED
    member = api_as("member", team=a.key.row.team.name)  # what republish needs
    assert member.post(f"/api/messages/{message.id}/resend/").status_code == 200


def test_republish_marks_the_next_attempt_as_a_person_s(teams):
    a = teams["a"]
    message = delivered(a)
    ScheduledMessage.objects.filter(id=message.id).update(status=Status.FAILED)
    assert a.post(f"/api/messages/{message.id}/republish/").json()["status"] == "pending"
    assert a.get(f"/api/messages/{message.id}/").json()["trigger"] == "manual"


def test_the_schema_documents_attempts_and_resend(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    listed = schema["paths"]["/api/messages/{id}/attempts/"]["get"]
    page = listed["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    item = schema["components"]["schemas"][page]["properties"]["results"]["items"]["$ref"].rsplit("/", 1)[-1]
    assert set(schema["components"]["schemas"][item]["properties"]) == FIELDS
    assert "post" in schema["paths"]["/api/messages/{id}/resend/"]

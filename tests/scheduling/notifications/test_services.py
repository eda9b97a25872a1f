"""Notifications and callbacks made where their facts are recorded, against the real database: a
webhook's give-up and its 4th failure in a row, a delivery with a callback (the webhook path and
the set-based record-only path), an endpoint disabled, a quota at 80 %; the body's exact shape; no
notification about a notification; one refused by the quota dropped and counted, the delivery
recorded all the same. The rows stay pending here (no commit): the e2e test sees them delivered."""

import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.config.conf import conf
from scheduling.delivery.services import delivery_receive_many
from scheduling.delivery.webhook_calls import webhook_call_record, webhook_call_take
from scheduling.delivery.webhooks import Call, CallResult
from scheduling.messages.notifying import notification_emit_quota_warnings, quota_warnings_asked
from scheduling.models import (
    AttemptOutcome,
    Endpoint,
    EndpointHealth,
    NotificationRoute,
    NotificationType,
    QuotaWarning,
    ScheduledMessage,
)
from scheduling.observability import metrics
from scheduling.teams.services import team_create
from tests.conftest import _key_client

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status
MESSAGE_KEYS = {"id", "endpoint", "event", "status", "attempts", "last_status_code", "last_error", "due_at",
                "delivered_at"}


@pytest.fixture
def world(versions):
    tag = uuid.uuid4().hex[:6]
    team = team_create(name=f"n-{tag}")

    def endpoint(name, handler="webhook", **fields):
        return Endpoint.objects.create(name=name, queue=f"{team.name}--{name}", topology=versions["v3"],
                                       handler=handler, team=team, webhook_secret="s" * 32,
                                       handler_target="https://example.com/hook" if handler == "webhook" else "",
                                       **fields)

    hook, notes, done = endpoint("hook"), endpoint("notes", handler="none"), endpoint("done", handler="none")
    NotificationRoute.objects.create(team=team, endpoint=notes, events=list(NotificationType.values[:5]))
    return {"team": team, "hook": hook, "notes": notes, "done": done, "endpoint": endpoint}


def message(endpoint, *, attempts=0, due_in=timedelta(milliseconds=-20), **fields):
    now = timezone.now()
    return ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, payload={"order": 7},
                                           due_at=now + due_in, requested_delay_ms=0, status=Status.PUBLISHED,
                                           attempts=attempts, created_at=now - timedelta(hours=1), **fields)


def call(row, *, ok: bool, status=None):
    (taken,) = webhook_call_take(items=[(str(row.id), row.attempts, None, None)],
                                 deadlines={str(row.id): 5.0})[0].values()
    result = CallResult(Call(taken.message_id, taken.endpoint_id, 1, "https://example.com/hook", b"{}", {}, 5.0, (), 8),
                        time.time(), 12, AttemptOutcome.OK if ok else AttemptOutcome.HTTP_STATUS,
                        status or (200 if ok else 500), "ok" if ok else "boom", None, True)
    taken.team_id = row.endpoint.team_id
    return webhook_call_record(results=[(result, taken)], by="w1")


def notes(world, kind=None):
    rows = ScheduledMessage.objects.filter(notification__isnull=False).order_by("created_at")
    return [r for r in rows if kind is None or r.notification == kind]


def test_a_webhook_that_gives_up_tells_the_route_and_its_on_failed_endpoint_once_each(world):
    row = message(world["hook"], attempts=conf().handler_max_retries, on_failed=world["done"])
    call(row, ok=False, status=503)
    made = notes(world)
    assert sorted((m.endpoint.name, m.notification) for m in made) == [
        ("done", "message.failed"), ("notes", "message.failed")]
    body = made[0].payload
    assert set(body) == {"type", "id", "created_at", "team", "message"}
    assert body["type"] == "message.failed" and body["id"] == str(made[0].id) and body["team"] == world["team"].name
    assert set(body["message"]) == MESSAGE_KEYS | {"failed_at"}
    assert body["message"]["id"] == str(row.id) and body["message"]["status"] == "failed"
    assert body["message"]["attempts"] == conf().handler_max_retries + 1
    assert body["message"]["last_status_code"] == 503 and "503" in body["message"]["last_error"]
    assert all(m.status == Status.PENDING and m.due_at <= timezone.now() and m.payload_bytes for m in made)


def test_the_fourth_failure_in_a_row_says_attempt_failing_once(world):
    row = message(world["hook"], attempts=2)
    call(row, ok=False)
    assert notes(world) == []  # the third failure: nothing yet
    row.refresh_from_db()
    call(row, ok=False)
    (failing,) = notes(world)
    assert failing.notification == "message.attempt_failing" and failing.payload["message"]["attempts"] == 4
    row.refresh_from_db()
    call(row, ok=False)
    assert len(notes(world)) == 1  # once per message


def test_a_notification_that_fails_tells_nothing(world):
    row = message(world["hook"], attempts=conf().handler_max_retries, notification="message.failed",
                  on_failed=world["done"])
    call(row, ok=False)
    assert [m.pk for m in notes(world)] == [row.pk]  # only itself: nothing made about it


def test_a_delivered_webhook_tells_its_on_delivered_endpoint_and_a_batch_without_callbacks_costs_no_statement(world):
    plain = message(world["hook"])
    with CaptureQueriesContext(connection) as plain_queries:
        call(plain, ok=True)
    assert notes(world) == []
    assert not any("notification IS NULL" in q["sql"] and "SELECT" in q["sql"][:10] for q in plain_queries)
    told = message(world["hook"], on_delivered=world["done"])
    call(told, ok=True)
    (callback,) = notes(world)
    assert callback.endpoint == world["done"] and callback.notification == "message.delivered"
    assert callback.payload["message"]["status"] == "delivered" and callback.payload["message"]["delivered_at"]
    assert "failed_at" not in callback.payload["message"]


def test_the_set_based_path_tells_callbacks_of_record_only_messages(world):
    rows = [message(world["notes"], on_delivered=world["done"] if n % 2 else None) for n in range(6)]
    outcomes = delivery_receive_many(items=[(str(r.id), 0) for r in rows])
    assert {o.result.value for o in outcomes} == {"delivered"}
    made = notes(world)
    assert sorted(m.payload["message"]["id"] for m in made) == sorted(str(r.id) for r in rows[1::2])
    assert {m.notification for m in made} == {"message.delivered"}
    # the callbacks, record-only themselves, are delivered as any message is: and tell nothing
    ScheduledMessage.objects.filter(pk__in=[m.pk for m in made]).update(status=Status.PUBLISHED)
    delivery_receive_many(items=[(str(m.id), 0) for m in made])
    assert len(notes(world)) == 3


def test_an_endpoint_disabled_for_failing_says_endpoint_disabled(world, settings):
    hook = world["hook"]
    EndpointHealth.objects.create(endpoint=hook, consecutive_failures=50,
                                  failing_since=timezone.now() - timedelta(days=10))
    recorded = call(message(hook), ok=False)
    assert recorded.disabled == [hook.pk]
    (told,) = notes(world, "endpoint.disabled")
    assert told.endpoint == world["notes"]
    assert told.payload["endpoint"]["name"] == "hook" and told.payload["endpoint"]["is_active"] is False
    assert told.payload["endpoint"]["consecutive_failures"] == 51 and told.payload["endpoint"]["disabled_reason"]
    assert "message" not in told.payload


def test_a_circuit_opening_says_so(world):
    hook = world["hook"]
    EndpointHealth.objects.create(endpoint=hook, consecutive_failures=conf().webhook_circuit_failures - 1,
                                  failing_since=timezone.now())
    call(message(hook), ok=False)
    (told,) = notes(world, "endpoint.circuit_opened")
    assert told.payload["endpoint"]["paused_until"] is not None


def test_a_notification_the_quota_refuses_is_dropped_counted_and_the_delivery_recorded(
        world, django_capture_on_commit_callbacks):
    team = world["team"]
    team.max_in_flight = 1
    team.save(update_fields=["max_in_flight"])
    message(world["done"], due_in=timedelta(hours=1))  # the one message in flight the team may have
    row = message(world["hook"], attempts=conf().handler_max_retries, on_failed=world["done"])
    before = metrics.NOTIFICATIONS.labels("message.failed", "dropped")._value.get()
    with django_capture_on_commit_callbacks(execute=True):  # counted once the batch commits
        call(row, ok=False)
    row.refresh_from_db()
    assert row.status == Status.FAILED and notes(world) == []
    assert metrics.NOTIFICATIONS.labels("message.failed", "dropped")._value.get() == before + 2


def test_a_quota_warning_is_told_once_an_hour_per_team_and_quota(world, monkeypatch):
    monkeypatch.setattr(quota_warnings_asked, "due", lambda team_id, quota: True)  # as another process would
    team = world["team"]
    assert len(notification_emit_quota_warnings(team=team, warnings=[("messages_in_flight", 80, 100)]).rows) == 1
    assert notification_emit_quota_warnings(team=team, warnings=[("messages_in_flight", 90, 100)]).rows == []
    (told,) = notes(world, "quota.warning")
    assert told.payload["quota"] == {"name": "messages_in_flight", "used": 80, "limit": 100, "ratio": 0.8}
    QuotaWarning.objects.filter(team=team).update(warned_at=timezone.now() - timedelta(hours=2))
    assert len(notification_emit_quota_warnings(team=team, warnings=[("messages_in_flight", 95, 100)]).rows) == 1


def test_a_team_above_80_percent_is_asked_once_a_minute_per_process(world):
    team = world["team"]
    with CaptureQueriesContext(connection) as queries:
        for _ in range(5):
            notification_emit_quota_warnings(team=team, warnings=[("bytes_in_flight", 90, 100)])
    assert sum("INSERT INTO" in q["sql"] and "quotawarning" in q["sql"] for q in queries) == 1
    assert len(notes(world, "quota.warning")) == 1


def test_a_scheduling_request_past_80_percent_tells_the_team(world):
    team = world["team"]
    client = _key_client(team=team, scopes=["all"])
    team.max_in_flight = 10
    team.save(update_fields=["max_in_flight"])
    response = client.post("/api/messages/bulk/", {"messages": [
        {"endpoint": "notes", "payload": {"n": n}, "delay_seconds": 3600} for n in range(8)]}, format="json")
    assert response.status_code == 201, response.content
    (told,) = notes(None, "quota.warning")
    assert told.endpoint.name == "notes" and told.payload["quota"] == {
        "name": "messages_in_flight", "used": 8, "limit": 10, "ratio": 0.8}


def test_the_one_by_one_path_tells_a_give_up(world, versions):
    """A webhook run by the one-by-one path (the scheduling.deliver task's), refused by its target."""
    from scheduling.delivery.services import delivery_receive

    hook = world["hook"]
    hook.handler_target = "http://127.0.0.1:9/hook"  # nothing listens there: refused
    hook.save(update_fields=["handler_target"])
    row = message(hook, attempts=conf().handler_max_retries, on_failed=world["done"])
    outcome = delivery_receive(message_id=str(row.id), attempt=row.attempts)
    assert outcome.result.value == "failed"
    assert sorted((m.endpoint.name, m.notification) for m in notes(world)) == [
        ("done", "message.failed"), ("notes", "message.failed")]


def test_a_claimed_celery_queue_task_tells_its_on_delivered_endpoint(world):
    from scheduling.celery.services import celery_task_claim_message

    tasks = world["endpoint"]("tasks", handler="celery_queue")
    row = message(tasks, on_delivered=world["done"])
    assert celery_task_claim_message(message_id=str(row.id), redelivered=False).run
    (callback,) = notes(world)
    assert callback.notification == "message.delivered" and callback.payload["message"]["id"] == str(row.id)

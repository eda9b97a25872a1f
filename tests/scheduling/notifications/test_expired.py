"""An expired message tells, once (issue 49's edge): every path that expires a message -- a copy's
arrival on the one-by-one path, a handler whose retry would come too late, a webhook's take and its
failed call, the Celery claim, the relay, the timeout manager and the rescue -- makes one
``message.expired`` for the team's routes that take it and one for the message's ``on_failed``
endpoint, in the transaction that expires it; a second copy, a second path or a second pass makes
none. A route for ``message.failed`` only hears nothing of it; a notification that expires tells
nothing. Counted as the notification rows made (their bodies name the message)."""

import time
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.celery.services import celery_task_claim_message
from scheduling.config.conf import broker
from scheduling.delivery.services import Result, delivery_receive_many
from scheduling.delivery.webhook_calls import webhook_call_record, webhook_call_take
from scheduling.delivery.webhooks import Call, CallResult
from scheduling.messages.relay import relay_publish, timeout_publish_due
from scheduling.messages.rescue import message_rescue_overdue
from scheduling.models import (
    AttemptOutcome,
    DeliveryMode,
    Endpoint,
    NotificationRoute,
    NotificationType,
    ScheduledMessage,
)
from scheduling.teams.services import team_create

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status
EXPIRED = NotificationType.MESSAGE_EXPIRED.value
TOLD_ONCE = Counter({("expired-notes", EXPIRED): 1, ("outcomes", EXPIRED): 1})
PAST = timedelta(milliseconds=-1)


@pytest.fixture
def world(versions):
    team = team_create(name=f"x-{uuid.uuid4().hex[:6]}")

    def endpoint(name, handler="none", **fields):
        return Endpoint.objects.create(name=name, queue=f"{team.name}--{name}", topology=versions["v3"],
                                       handler=handler, team=team, webhook_secret="s" * 32,
                                       handler_target="https://example.com/hook" if handler == "webhook" else "",
                                       **fields)

    made = {name: endpoint(name, handler) for name, handler in (
        ("rec", "none"), ("hook", "webhook"), ("tasks", "celery_queue"), ("expired-notes", "none"),
        ("failed-notes", "none"), ("outcomes", "none"))}
    made["late"] = endpoint("late", delivery_mode=DeliveryMode.TIMEOUT_MANAGER)
    NotificationRoute.objects.create(team=team, endpoint=made["expired-notes"], events=[EXPIRED])
    NotificationRoute.objects.create(team=team, endpoint=made["failed-notes"],
                                     events=[NotificationType.MESSAGE_FAILED.value])
    return made


def message(world, endpoint="rec", *, expires_in=PAST, status=Status.PUBLISHED, due_in=timedelta(seconds=-1),
            **fields):
    now, target = timezone.now(), world[endpoint]
    fields = {"payload": {"order": 7}, "on_failed": world["outcomes"], **fields}
    return ScheduledMessage.objects.create(
        endpoint=target, topology=target.topology, due_at=now + due_in, requested_delay_ms=0, status=status,
        created_at=now - timedelta(hours=1), expires_at=now + expires_in, delivery_mode=target.delivery_mode,
        **fields)


def told(row) -> Counter:
    """The notifications and callbacks made about ``row``: (the endpoint they go to, their type)."""
    return Counter((n.endpoint.name, n.notification) for n in ScheduledMessage.objects.filter(
        notification__isnull=False).select_related("endpoint") if (n.payload.get("message") or {}).get("id") == str(row.id))


def take(row):
    return webhook_call_take(items=[(str(row.id), row.attempts, None, None)], deadlines={str(row.id): 5.0})


def failed_call(taken):
    call = Call(taken.message_id, taken.endpoint_id, 1, "https://example.com/hook", b"{}", {}, 5.0, (), 8)
    return CallResult(call, time.time(), 12, AttemptOutcome.HTTP_STATUS, 500, "no", None, True), taken


def test_a_copy_arriving_past_its_expiry_tells_once_whatever_copies_follow(world):
    row = message(world)
    # two copies in one batch, then a third later: the first expires it, the others find it expired
    outcomes = delivery_receive_many(items=[(str(row.id), 0), (str(row.id), 0)])
    assert [o.result for o in outcomes] == [Result.EXPIRED, Result.EXPIRED]
    delivery_receive_many(items=[(str(row.id), 0)])
    assert told(row) == TOLD_ONCE
    (note,) = [n for n in ScheduledMessage.objects.filter(notification=EXPIRED, endpoint=world["expired-notes"])]
    body = note.payload
    assert body["type"] == EXPIRED and body["team"] == world["rec"].team.name
    assert body["message"]["status"] == "expired" and body["message"]["expired_at"]
    assert body["message"]["delivered_at"] is None
    assert "failed_at" not in body["message"] and "expired at" in body["message"]["last_error"]


def test_a_handler_whose_retry_would_come_after_the_expiry_tells_once(world, settings, monkeypatch):
    settings.DELAY_HANDLER_BACKOFF_SECONDS = 10  # the retry 10 s after the failure: past the expiry in 5 s
    monkeypatch.setattr("scheduling.delivery.services.run_handler", lambda message: 1 / 0)  # the handler raises
    row = message(world, "hook", expires_in=timedelta(seconds=5))
    (outcome,) = delivery_receive_many(items=[(str(row.id), 0)], defer_webhooks=False)
    assert outcome.result is Result.EXPIRED
    delivery_receive_many(items=[(str(row.id), 0)], defer_webhooks=False)  # a duplicate copy
    assert told(row) == TOLD_ONCE


def test_a_webhook_taken_past_its_expiry_tells_once(world):
    row = message(world, "hook")
    for _ in range(2):
        taken, others = take(row)
        assert not taken and others[str(row.id)].result is Result.EXPIRED
    assert told(row) == TOLD_ONCE


def test_a_failed_call_whose_retry_would_come_after_the_expiry_tells_once(world, settings):
    settings.DELAY_HANDLER_BACKOFF_SECONDS = 10
    row = message(world, "hook", expires_in=timedelta(seconds=5))
    taken, _ = take(row)
    recorded = webhook_call_record(results=[failed_call(taken[str(row.id)])])
    assert recorded.outcomes[str(row.id)].result is Result.EXPIRED
    assert take(row)[1][str(row.id)].result is Result.EXPIRED  # a later copy finds it expired
    assert told(row) == TOLD_ONCE


def test_a_celery_task_claimed_past_its_expiry_tells_once(world):
    row = message(world, "tasks", payload={"celery": {}})
    for redelivered in (False, True):
        claim = celery_task_claim_message(message_id=str(row.id), redelivered=redelivered)
        assert not claim.run and claim.message.status == Status.EXPIRED
    assert told(row) == TOLD_ONCE


def test_the_relay_and_the_timeout_manager_expiring_rows_tell_once_each(world):
    pending = message(world, status=Status.PENDING)
    late = message(world, "late", status=Status.PENDING, due_in=timedelta(milliseconds=-500))
    for _ in range(2):
        assert relay_publish(ids=[str(pending.id)]).published == 0
        assert timeout_publish_due().published == 0
    assert told(pending) == TOLD_ONCE and told(late) == TOLD_ONCE


def test_the_rescue_expiring_an_overdue_row_tells_once(world):
    now = timezone.now()
    row = message(world, due_in=timedelta(seconds=-3), published_at=now - timedelta(seconds=6))
    for _ in range(2):
        assert message_rescue_overdue(queues={world["rec"].queue}, skip=set(),
                                      publish=lambda out: broker().publish(out), limit=100) == 0
    row.refresh_from_db()
    assert row.status == Status.EXPIRED and told(row) == TOLD_ONCE


def test_a_message_without_on_failed_tells_the_routes_only_and_a_notification_tells_nothing(world):
    plain = message(world, on_failed=None)
    note = message(world, notification=NotificationType.MESSAGE_FAILED.value, on_failed=None)
    delivery_receive_many(items=[(str(plain.id), 0), (str(note.id), 0)])
    assert told(plain) == Counter({("expired-notes", EXPIRED): 1})
    assert not told(note) and ScheduledMessage.objects.get(id=note.id).status == Status.EXPIRED

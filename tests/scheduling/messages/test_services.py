"""message_schedule / message_schedule_many / message_cancel / message_republish /
message_resend, on the real database; rows are created without a broker (on_commit kicks never
fire in these tests)."""

from datetime import datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from scheduling.core.errors import BulkValidationError, Conflict, NotFound
from scheduling.messages.services import (
    message_cancel,
    message_republish,
    message_reschedule,
    message_resend,
    message_schedule_many,
)
from scheduling.models import Endpoint, ScheduledMessage
from tests.scheduling.messages.conftest import schedule

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


def test_idempotency_key_returns_the_existing_message(endpoint, versions):
    first = schedule(endpoint, delay=5, idempotency_key="order-42")
    again = schedule(endpoint, delay=99, idempotency_key="order-42")
    assert again.id == first.id and again.requested_delay_ms == 5000
    other = Endpoint.objects.create(name=endpoint.name + "-b", queue=endpoint.name + "-b", topology=versions["v2"])
    assert schedule(other, delay=5, idempotency_key="order-42").id != first.id  # per endpoint
    assert ScheduledMessage.objects.count() == 2


def test_bulk_is_all_or_nothing_and_reports_each_bad_item(endpoint):
    items = [{"endpoint": endpoint.name, "payload": i, "delay": 1} for i in range(5)]
    items[1]["delay"] = -1
    items[3]["endpoint"] = "ghost"
    with pytest.raises(BulkValidationError) as caught:
        message_schedule_many(items=items)
    assert set(caught.value.errors) == {1, 3} and caught.value.total == 5
    assert ScheduledMessage.objects.count() == 0
    items[1]["delay"], items[3]["endpoint"] = 1, endpoint.name
    results = message_schedule_many(items=items)
    assert [r.message.payload for r in results] == [0, 1, 2, 3, 4] and all(r.created for r in results)


def test_bulk_repeating_a_key_in_one_request_creates_one_message(endpoint):
    items = [{"endpoint": endpoint.name, "payload": i, "delay": 1, "idempotency_key": "same"} for i in range(3)]
    results = message_schedule_many(items=items)
    assert [r.created for r in results] == [True, False, False]
    assert len({r.message.id for r in results}) == 1 and ScheduledMessage.objects.count() == 1


@pytest.mark.parametrize("status", [Status.PENDING, Status.PUBLISHED])
def test_cancel_pending_or_published(endpoint, status):
    message = schedule(endpoint, delay=60)
    ScheduledMessage.objects.filter(id=message.id).update(status=status)
    assert message_cancel(message_id=message.id).status == Status.CANCELLED
    assert message_cancel(message_id=message.id).status == Status.CANCELLED  # twice is fine
    message.refresh_from_db()
    assert message.cancelled_at is not None


@pytest.mark.parametrize("status", [Status.DELIVERED, Status.FAILED])
def test_cancel_after_delivery_or_failure_is_a_conflict(endpoint, status):
    message = schedule(endpoint, delay=60)
    ScheduledMessage.objects.filter(id=message.id).update(status=status)
    with pytest.raises(Conflict, match=f"already {status}"):
        message_cancel(message_id=message.id)


def test_cancel_unknown_message():
    for bad in ("00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        with pytest.raises(NotFound):
            message_cancel(message_id=bad)


def test_republish_only_failed_messages(endpoint):
    message = schedule(endpoint, delay=0)
    with pytest.raises(Conflict, match="only failed"):
        message_republish(message_id=message.id)
    ScheduledMessage.objects.filter(id=message.id).update(
        status=Status.FAILED, attempts=6, delivered_at=timezone.now(), lateness_ms=3
    )
    message = message_republish(message_id=message.id)
    message.refresh_from_db()
    assert (message.status, message.attempts, message.delivered_at, message.lateness_ms) == (Status.PENDING, 0, None, None)
    assert message.trigger == "manual"  # its next attempt is a person's


@pytest.mark.parametrize("status", [Status.DELIVERED, Status.FAILED])
def test_resend_starts_a_delivered_or_failed_message_over_as_a_manual_attempt(endpoint, status):
    message = schedule(endpoint, delay=0)
    ScheduledMessage.objects.filter(id=message.id).update(
        status=status, attempts=2, delivered_at=timezone.now(), lateness_ms=3, finished_at=timezone.now(),
        delivery_count=1)
    message_resend(message_id=message.id)
    row = ScheduledMessage.objects.get(id=message.id)
    assert (row.status, row.attempts, row.delivered_at, row.lateness_ms, row.finished_at, row.trigger) == (
        Status.PENDING, 0, None, None, None, "manual")
    assert row.delivery_count == 1  # the broker's hand-overs stay counted


@pytest.mark.parametrize("status", [Status.PENDING, Status.PUBLISHED, Status.CANCELLED])
def test_resend_refuses_what_was_not_delivered(endpoint, status):
    message = schedule(endpoint, delay=60)
    ScheduledMessage.objects.filter(id=message.id).update(status=status)
    with pytest.raises(Conflict, match="only delivered or failed messages can be resent"):
        message_resend(message_id=message.id)
    assert ScheduledMessage.objects.get(id=message.id).status == status


def test_resend_waits_for_a_webhook_call_in_flight(endpoint):
    message = schedule(endpoint, delay=0)
    ScheduledMessage.objects.filter(id=message.id).update(status=Status.DELIVERED,
                                                          call_lease_until=timezone.now() + timedelta(seconds=30))
    with pytest.raises(Conflict, match="webhook call in flight"):
        message_resend(message_id=message.id)
    ScheduledMessage.objects.filter(id=message.id).update(call_lease_until=timezone.now() - timedelta(seconds=1))
    assert message_resend(message_id=message.id).status == Status.PENDING  # the lease passed: the worker died


@pytest.mark.parametrize("moved", [timedelta(hours=1), -timedelta(seconds=50)])
def test_reschedule_moves_a_published_message_keeps_its_id_and_its_old_due_time(endpoint, moved):
    message = schedule(endpoint, delay=60)
    assert message.status == Status.PUBLISHED
    target = message.due_at + moved
    moved_message = message_reschedule(message_id=message.id, deliver_at=target)
    row = ScheduledMessage.objects.get(pk=message.pk)
    assert moved_message.id == message.id and row.due_at == target and row.status == Status.PENDING
    assert row.published_at is None  # its copy for the new time is published after the commit
    assert [h["due_at"] for h in row.due_history] == [message.due_at.isoformat().replace("+00:00", "Z")]
    assert abs(row.requested_delay_ms - (target - timezone.now()) / timedelta(milliseconds=1)) < 1000


def test_reschedule_by_a_delay_and_again(endpoint):
    message = schedule(endpoint, delay=60)
    before = timezone.now()
    message_reschedule(message_id=message.id, delay="2.5")
    message_reschedule(message_id=message.id, delay=10)
    row = ScheduledMessage.objects.get(pk=message.pk)
    assert timedelta(seconds=10) <= row.due_at - before < timedelta(seconds=11)
    assert len(row.due_history) == 2


@pytest.mark.parametrize(("kwargs", "field", "text"), [
    ({}, "delay", "exactly one"),
    ({"delay": 1, "deliver_at": timezone.now()}, "delay", "exactly one"),
    ({"delay": -1}, "delay", "must not be negative"),
    ({"delay": 10**12}, "delay", "maximum delay"),
    ({"deliver_at": datetime(2030, 1, 1)}, "deliver_at", "with a timezone"),
])
def test_a_bad_new_time_is_a_field_error_and_changes_nothing(endpoint, kwargs, field, text):
    message = schedule(endpoint, delay=60)
    with pytest.raises(ValidationError) as caught:
        message_reschedule(message_id=message.id, **kwargs)
    assert text in caught.value.message_dict[field][0]
    row = ScheduledMessage.objects.get(pk=message.pk)
    assert row.due_at == message.due_at and row.status == Status.PUBLISHED and row.due_history is None


@pytest.mark.parametrize("status", [Status.DELIVERED, Status.CANCELLED, Status.FAILED])
def test_a_finished_message_cannot_be_rescheduled(endpoint, status):
    message = schedule(endpoint, delay=60)
    ScheduledMessage.objects.filter(pk=message.pk).update(status=status)
    with pytest.raises(Conflict, match=f"already {status} and cannot be rescheduled"):
        message_reschedule(message_id=message.id, delay=5)
    with pytest.raises(NotFound):
        message_reschedule(message_id="00000000-0000-0000-0000-000000000000", delay=5)

"""Expiry on the hand-over paths, against the real database (issue 49): a copy arriving past its
message's expires_at is never handed over and the message ends expired (counted once), a copy of an
already expired row is dropped with nothing recorded, a webhook's failed call whose retry would come
after the expiry expires instead of retrying, and the relay expires instead of publishing."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from scheduling.delivery.services import Result, delivery_receive_many
from scheduling.delivery.webhook_calls import webhook_call_record, webhook_call_take
from scheduling.delivery.webhooks import Call, CallResult
from scheduling.messages.relay import relay_publish
from scheduling.models import AttemptOutcome, Endpoint, ScheduledMessage

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


@pytest.fixture
def make(versions, endpoint_name):
    def make(handler="none", due_in=timedelta(seconds=-1), expires_in=None, status=Status.PUBLISHED, attempts=0):
        endpoint, _ = Endpoint.objects.get_or_create(
            name=endpoint_name, defaults=dict(queue=endpoint_name, topology=versions["v3"], handler=handler,
                                              handler_target="https://example.com/hook" if handler == "webhook" else "",
                                              webhook_secret="s" * 32))
        now = timezone.now()
        return ScheduledMessage.objects.create(
            endpoint=endpoint, topology=versions["v3"], payload={"order": 7}, due_at=now + due_in,
            requested_delay_ms=0, status=status, attempts=attempts, created_at=now - timedelta(hours=1),
            expires_at=None if expires_in is None else now + expires_in)

    return make


def expired_count(message) -> float:
    return REGISTRY.get_sample_value("delay_messages_expired_total", {
        "team": message.endpoint.team.name, "endpoint": message.endpoint.name, "version": "v3"}) or 0.0


def test_a_copy_past_its_expiry_expires_the_message_beside_one_delivered(make, django_capture_on_commit_callbacks):
    late = make(expires_in=timedelta(milliseconds=-1))
    fine = make(expires_in=timedelta(minutes=5))
    never = make()
    before = expired_count(late)
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = delivery_receive_many(items=[(str(m.id), 0) for m in (late, fine, never)])
    assert [o.result for o in outcomes] == [Result.EXPIRED, Result.DELIVERED, Result.DELIVERED]
    late.refresh_from_db()
    assert (late.status, late.delivered_at, late.delivery_count) == (Status.EXPIRED, None, 0)
    assert late.finished_at is not None and "expired at" in late.last_error
    assert expired_count(late) == before + 1


def test_a_copy_of_an_expired_row_is_dropped_with_nothing_recorded(make, django_capture_on_commit_callbacks):
    message = make(expires_in=timedelta(milliseconds=-1))
    delivery_receive_many(items=[(str(message.id), 0)])
    message.refresh_from_db()
    was = (message.status, message.finished_at, message.delivery_count, message.last_error)
    before = expired_count(message)
    with django_capture_on_commit_callbacks(execute=True):
        (again,) = delivery_receive_many(items=[(str(message.id), 0)])
    assert again.result is Result.EXPIRED
    message.refresh_from_db()
    assert (message.status, message.finished_at, message.delivery_count, message.last_error) == was
    assert expired_count(message) == before  # counted once, when it expired


def test_a_retry_copy_past_its_expiry_is_not_handed_over(make):
    message = make(attempts=2, expires_in=timedelta(milliseconds=-1))
    (outcome,) = delivery_receive_many(items=[(str(message.id), 2)])
    assert outcome.result is Result.EXPIRED
    message.refresh_from_db()
    assert message.status == Status.EXPIRED and message.attempts == 2


def take(*messages, attempt=0):
    return webhook_call_take(items=[(str(m.id), attempt, None, None) for m in messages],
                             deadlines={str(m.id): 5.0 for m in messages})


def failed_call(taken, retry_after=None):
    call = Call(taken.message_id, taken.endpoint_id, 1, "https://example.com/hook", b"{}", {}, 5.0, (), 8)
    return CallResult(call, time.time(), 12, AttemptOutcome.HTTP_STATUS, 500, "no", retry_after, True), taken


def test_a_webhook_past_its_expiry_is_not_called(make):
    late = make(handler="webhook", expires_in=timedelta(milliseconds=-1))
    fine = make(handler="webhook", expires_in=timedelta(minutes=5))
    taken, others = take(late, fine)
    assert list(taken) == [str(fine.id)] and others[str(late.id)].result is Result.EXPIRED
    late.refresh_from_db()
    assert late.status == Status.EXPIRED and late.delivery_count == 0 and late.call_lease_until is None


def test_a_failed_call_whose_retry_would_come_after_the_expiry_expires_instead(make, settings):
    settings.DELAY_HANDLER_BACKOFF_SECONDS = 10  # the first retry 10 s after the failure
    soon = make(handler="webhook", expires_in=timedelta(seconds=5))
    later = make(handler="webhook", expires_in=timedelta(minutes=5))
    taken, _ = take(soon, later)
    recorded = webhook_call_record(results=[failed_call(taken[str(soon.id)]), failed_call(taken[str(later.id)])])
    assert recorded.outcomes[str(soon.id)].result is Result.EXPIRED
    assert recorded.outcomes[str(later.id)].result is Result.RETRY
    soon.refresh_from_db()
    assert soon.status == Status.EXPIRED and soon.attempts == 1 and "expired at" in soon.last_error
    later.refresh_from_db()
    assert later.status == Status.PUBLISHED and later.attempts == 1


def test_the_relay_expires_a_pending_row_past_its_expiry_instead_of_publishing_it(make):
    message = make(status=Status.PENDING, expires_in=timedelta(milliseconds=-1))
    result = relay_publish(ids=[str(message.id)])
    assert result.published == 0 and result.failed == 0
    message.refresh_from_db()
    assert message.status == Status.EXPIRED and message.published_at is None

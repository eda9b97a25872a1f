"""delivery_receive: the consumer's decision for each hand-over, against the real database
(and a real local HTTP server for webhook handlers)."""

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Endpoint, ScheduledMessage
from scheduling.services.delivery import Result, delivery_receive, delivery_receive_many, delivery_retry_unsent
from tests.support import RecordingServer

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


@pytest.fixture
def make(versions, endpoint_name):
    def make(handler="none", target="", due_in=timedelta(0), status=Status.PUBLISHED, secret="s" * 32):
        endpoint, _ = Endpoint.objects.get_or_create(
            name=endpoint_name, defaults=dict(topology=versions["v2"], handler=handler, handler_target=target,
                                              webhook_secret=secret),
        )
        now = timezone.now()
        return ScheduledMessage.objects.create(
            endpoint=endpoint, topology=versions["v2"], payload={"order": 7}, due_at=now + due_in,
            requested_delay_ms=0, status=status,
        )

    return make


def test_first_hand_over_delivers_and_records_lateness(make):
    message = make(due_in=timedelta(milliseconds=-30))
    assert delivery_receive(message_id=str(message.id)).result is Result.DELIVERED
    message.refresh_from_db()
    assert message.status == Status.DELIVERED and message.delivery_count == 1
    assert message.delivered_at >= message.due_at
    assert 30 <= message.lateness_ms < 1000
    assert message.lateness_ms == (message.delivered_at - message.due_at) // timedelta(milliseconds=1)


def test_duplicate_is_counted_and_suppressed(make):
    message = make()
    delivery_receive(message_id=str(message.id))
    delivered_at = ScheduledMessage.objects.get(id=message.id).delivered_at
    assert delivery_receive(message_id=str(message.id)).result is Result.DUPLICATE
    assert delivery_receive(message_id=str(message.id)).result is Result.DUPLICATE
    message.refresh_from_db()
    assert message.delivery_count == 3 and message.delivered_at == delivered_at


def test_cancelled_message_is_dropped_and_counted(make):
    message = make(status=Status.CANCELLED)
    with RecordingServer() as server:
        Endpoint.objects.filter(id=message.endpoint_id).update(handler="webhook", handler_target=server.url)
        assert delivery_receive(message_id=str(message.id)).result is Result.CANCELLED
    assert server.requests == []
    message.refresh_from_db()
    assert message.status == Status.CANCELLED and message.delivery_count == 1 and message.delivered_at is None


def test_never_early(make):
    message = make(due_in=timedelta(seconds=30))
    outcome = delivery_receive(message_id=str(message.id))
    assert outcome.result is Result.EARLY and outcome.eta == message.due_at
    message.refresh_from_db()
    assert message.status == Status.PUBLISHED and message.delivery_count == 0


def test_pending_row_still_delivers(make):
    """The relay confirmed the publish but died before committing 'published'."""
    message = make(status=Status.PENDING)
    assert delivery_receive(message_id=str(message.id)).result is Result.DELIVERED


def test_unknown_message():
    assert delivery_receive(message_id="00000000-0000-0000-0000-000000000000").result is Result.UNKNOWN


def test_webhook_is_signed_over_the_exact_body(make):
    with RecordingServer() as server:
        message = make(handler="webhook", target=server.url)
        assert delivery_receive(message_id=str(message.id)).result is Result.DELIVERED
    (request,) = server.requests
    expected = "sha256=" + hmac.new(b"s" * 32, request["body"], hashlib.sha256).hexdigest()
    assert request["headers"]["X-Delay-Signature"] == expected
    assert json.loads(request["body"]) == {"order": 7}
    assert request["headers"]["X-Delay-Message-Id"] == str(message.id)


def test_handler_failure_retries_with_backoff_then_fails(make, settings):
    settings.DELAY_HANDLER_MAX_RETRIES = 2
    with RecordingServer(fail_first=10) as server:
        message = make(handler="webhook", target=server.url)
        first = delivery_receive(message_id=str(message.id))
        assert (first.result, first.attempt, first.retry_in) == (Result.RETRY, 1, 2.0)
        # a late duplicate of the original hand-over must not run the handler again
        assert delivery_receive(message_id=str(message.id), attempt=0).result is Result.DUPLICATE
        second = delivery_receive(message_id=str(message.id), attempt=1)
        assert (second.result, second.attempt, second.retry_in) == (Result.RETRY, 2, 4.0)
        assert delivery_receive(message_id=str(message.id), attempt=2).result is Result.FAILED
    assert len(server.requests) == 3
    message.refresh_from_db()
    assert message.status == Status.FAILED and message.attempts == 3
    assert "webhook answered 500" in message.last_error
    assert message.delivery_count == 2 and message.delivered_at is not None


def test_handler_recovers_on_a_retry(make):
    with RecordingServer(fail_first=1) as server:
        message = make(handler="webhook", target=server.url)
        assert delivery_receive(message_id=str(message.id)).result is Result.RETRY
        assert delivery_receive(message_id=str(message.id), attempt=1).result is Result.DELIVERED
    message.refresh_from_db()
    assert message.status == Status.DELIVERED and message.attempts == 1 and len(server.requests) == 2


def test_a_retry_the_broker_never_took_runs_the_handler_again_from_the_copy_handed_back(make):
    """The loop recorded a failed attempt, then could not publish its retry (the broker died):
    the unacked original comes back and must run the handler, not be dropped as a duplicate."""
    with RecordingServer(fail_first=1) as server:
        message = make(handler="webhook", target=server.url)
        assert delivery_receive(message_id=str(message.id)).result is Result.RETRY
        assert delivery_retry_unsent(message_id=str(message.id), attempt=1)
        assert not delivery_retry_unsent(message_id=str(message.id), attempt=1)  # once only
        assert delivery_receive(message_id=str(message.id), attempt=0).result is Result.DELIVERED
    message.refresh_from_db()
    assert message.status == Status.DELIVERED and message.attempts == 0 and len(server.requests) == 2
    assert message.delivery_count == 2  # both hand-overs of the original stay counted


@pytest.mark.parametrize("fail_first", [0, 1])
def test_two_copies_in_one_batch_run_the_handler_once(make, fail_first):
    """An at-least-once hand-over repeated within the loop's batch window: the first copy is
    delivered (its handler runs, and may fail and be retried), the second is a duplicate."""
    with RecordingServer(fail_first=fail_first) as server:
        message = make(handler="webhook", target=server.url)
        outcomes = delivery_receive_many([(str(message.id), 0), (str(message.id), 0)], defer_webhooks=False)
    first = Result.RETRY if fail_first else Result.DELIVERED
    assert [o.result for o in outcomes] == [first, Result.DUPLICATE]
    assert len(server.requests) == 1
    message.refresh_from_db()
    assert message.delivery_count == 2 and message.attempts == fail_first
    assert message.status == (Status.PUBLISHED if fail_first else Status.DELIVERED)


def test_deferred_webhook_copies_are_decided_one_by_one(make):
    """The loop's path for webhooks: the batch defers them untouched, then each copy takes the
    row lock in its own transaction, and the second sees the first one's delivery."""
    with RecordingServer() as server:
        message = make(handler="webhook", target=server.url)
        items = [(str(message.id), 0), (str(message.id), 0)]
        assert [o.result for o in delivery_receive_many(items)] == [Result.DEFERRED] * 2
        assert [delivery_receive(message_id=i, attempt=a).result for i, a in items] == [Result.DELIVERED,
                                                                                         Result.DUPLICATE]
    assert len(server.requests) == 1


def test_a_batch_keeps_the_order_and_outcome_of_each_item(make, endpoint_name):
    due = make()
    later = ScheduledMessage.objects.create(endpoint=due.endpoint, topology=due.topology, payload={},
                                            due_at=timezone.now() + timedelta(hours=1), requested_delay_ms=0,
                                            status=Status.PUBLISHED)
    cancelled = ScheduledMessage.objects.create(endpoint=due.endpoint, topology=due.topology, payload={},
                                                due_at=timezone.now(), requested_delay_ms=0, status=Status.CANCELLED)
    unknown = "00000000-0000-0000-0000-000000000000"
    items = [(str(later.id), 0), (unknown, 0), (str(due.id), 0), (str(cancelled.id), 0), (str(due.id), 0)]
    assert [o.result for o in delivery_receive_many(items)] == [
        Result.EARLY, Result.UNKNOWN, Result.DELIVERED, Result.CANCELLED, Result.DUPLICATE]


@pytest.mark.parametrize("size", [1, 200])
def test_a_batch_costs_the_same_queries_whatever_its_size(make, django_assert_num_queries, size):
    """The lock (with the endpoint's handler) and one write, inside the transaction (a savepoint
    here, as the test runs in one): no query per message."""
    messages = [make() for _ in range(size)]
    with django_assert_num_queries(4) as captured:
        outcomes = delivery_receive_many([(str(m.id), 0) for m in messages])
    assert [o.result for o in outcomes] == [Result.DELIVERED] * size
    assert ScheduledMessage.objects.filter(status=Status.DELIVERED).count() == size
    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["SAVEPOINT", "SELECT", "UPDATE", "RELEASE"]


def test_a_foreign_id_is_unknown_without_a_database_error(make):
    message = make()
    outcomes = delivery_receive_many([("not-a-uuid", 0), (str(message.id), 0)])
    assert [o.result for o in outcomes] == [Result.UNKNOWN, Result.DELIVERED]

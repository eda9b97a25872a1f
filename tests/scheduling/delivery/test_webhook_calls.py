"""Taking webhook rows for their calls (a lease) and recording what came of the calls, against the
real database: every outcome of a copy, the attempts kept, the health of the endpoint, and an
endpoint failing past the setting disabled with its messages kept."""

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.delivery.services import Result
from scheduling.delivery.webhook_calls import webhook_call_record, webhook_call_take
from scheduling.delivery.webhooks import Call, CallResult
from scheduling.models import (
    AttemptOutcome,
    AuditEvent,
    DeliveryMinute,
    Endpoint,
    EndpointHealth,
    MessageAttempt,
    ScheduledMessage,
)

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


@pytest.fixture
def make(versions, endpoint_name):
    def make(due_in=timedelta(0), status=Status.PUBLISHED, attempts=0):
        endpoint, _ = Endpoint.objects.get_or_create(
            name=endpoint_name, defaults=dict(queue=endpoint_name, topology=versions["v3"], handler="webhook",
                                              handler_target="https://example.com/hook", webhook_secret="s" * 32))
        now = timezone.now()
        return ScheduledMessage.objects.create(
            endpoint=endpoint, topology=versions["v3"], payload={"order": 7}, due_at=now + due_in,
            requested_delay_ms=0, status=status, attempts=attempts, created_at=now - timedelta(hours=1))

    return make


def take(*messages, attempt=0, due_ms=None):
    items = [(str(m.id), attempt, due_ms, None) for m in messages]
    return webhook_call_take(items=items, deadlines={str(m.id): 5.0 for m in messages})


def ended(taken, outcome=AttemptOutcome.OK, status=200, retry_after=None, called=True, excerpt="ok"):
    call = Call(taken.message_id, taken.endpoint_id, 1, "https://example.com/hook", b"{}", {}, 5.0, (), 8)
    return CallResult(call, time.time(), 12, outcome, status, excerpt, retry_after, called), taken


def test_a_due_row_is_leased_once_and_a_second_copy_waits(make):
    message = make(due_in=timedelta(milliseconds=-20))
    taken, others = take(message)
    assert list(taken) == [str(message.id)] and others == {}
    message.refresh_from_db()
    assert message.call_lease_until > timezone.now() + timedelta(seconds=5) and message.delivery_count == 1
    assert message.status == Status.PUBLISHED  # recorded only after the call
    again, others = take(message)
    assert again == {} and others[str(message.id)].result is Result.BUSY


def test_copies_not_taken_are_sorted_out(make):
    early = make(due_in=timedelta(seconds=30))
    cancelled = make(status=Status.CANCELLED)
    delivered = make(status=Status.DELIVERED)
    superseded = make(status=Status.SUPERSEDED)  # a newer message with its debounce key replaced it
    taken, others = take(early, cancelled, delivered, superseded)
    assert taken == {}
    assert others[str(superseded.id)].result is Result.SUPERSEDED
    assert others[str(early.id)].result is Result.EARLY and others[str(early.id)].eta == early.due_at
    assert others[str(cancelled.id)].result is Result.CANCELLED
    assert others[str(delivered.id)].result is Result.DUPLICATE
    delivered.refresh_from_db()
    assert delivered.delivery_count == 1  # the copy counted
    unknown = "0190f2a0-0000-7000-8000-000000000000"
    _, others = webhook_call_take(items=[(unknown, 0, None, None), ("not-a-row", 0, None, None)], deadlines={unknown: 5.0})
    assert {o.result for o in others.values()} == {Result.UNKNOWN}


def test_a_copy_for_an_older_due_time_is_superseded(make):
    message = make()
    taken, others = take(message, due_ms=12345)
    assert taken == {} and others[str(message.id)].result is Result.SUPERSEDED


def test_a_success_is_recorded_delivered_with_its_attempt_and_minute(make):
    message = make(due_in=timedelta(milliseconds=-50))
    taken, _ = take(message)
    recorded = webhook_call_record(results=[ended(taken[str(message.id)])], by="w1")
    assert recorded.outcomes[str(message.id)].result is Result.DELIVERED
    message.refresh_from_db()
    assert message.status == Status.DELIVERED and message.call_lease_until is None
    assert message.delivered_by == "w1" and 50 <= message.lateness_ms < 5000
    (attempt,) = MessageAttempt.objects.filter(message=message)
    assert (attempt.number, attempt.trigger, attempt.outcome, attempt.status_code, attempt.duration_ms,
            attempt.excerpt, attempt.worker) == (1, "scheduled", "ok", 200, 12, "ok", "w1")
    assert sum(DeliveryMinute.objects.values_list("deliveries", flat=True)) == 1
    assert not EndpointHealth.objects.exists()  # a healthy endpoint writes no health


def test_a_failure_is_retried_after_at_least_its_retry_after_and_counted(make, settings):
    message = make()
    taken, _ = take(message)
    recorded = webhook_call_record(results=[ended(taken[str(message.id)], AttemptOutcome.HTTP_STATUS, 429, "30")])
    outcome = recorded.outcomes[str(message.id)]
    assert outcome.result is Result.RETRY and outcome.attempt == 1 and outcome.retry_in >= 30
    message.refresh_from_db()
    assert (message.status, message.attempts, message.call_lease_until) == (Status.PUBLISHED, 1, None)
    assert message.last_error == "handler attempt 1: webhook answered 429"
    health = EndpointHealth.objects.get(endpoint=message.endpoint)
    assert health.consecutive_failures == 1 and health.paused_until >= timezone.now() + timedelta(seconds=29)
    assert recorded.paused[message.endpoint_id] == health.paused_until
    (attempt,) = MessageAttempt.objects.filter(message=message)
    assert attempt.outcome == "http_status" and attempt.status_code == 429


def test_a_retry_attempt_is_numbered_and_its_success_closes_the_health(make):
    message = make(attempts=1)
    EndpointHealth.objects.create(endpoint=message.endpoint, consecutive_failures=3,
                                  failing_since=timezone.now() - timedelta(hours=1))
    taken, _ = take(message, attempt=1)
    webhook_call_record(results=[ended(taken[str(message.id)])])
    assert MessageAttempt.objects.get(message=message).number == 2
    assert MessageAttempt.objects.get(message=message).trigger == "retry"
    health = EndpointHealth.objects.get(endpoint=message.endpoint)
    assert health.consecutive_failures == 0 and health.failing_since is None


def test_the_circuit_opens_after_consecutive_failures(make, settings):
    messages = [make() for _ in range(3)]
    taken, _ = take(*messages)
    from scheduling.config.conf import conf
    threshold = conf().webhook_circuit_failures
    more = [make() for _ in range(threshold)]
    taken_more, _ = take(*more)
    results = [ended(t, AttemptOutcome.TIMEOUT, None, excerpt="deadline passed")
               for t in [*taken.values(), *taken_more.values()]]
    recorded = webhook_call_record(results=results)
    health = EndpointHealth.objects.get(endpoint=messages[0].endpoint)
    assert health.consecutive_failures == threshold + 3 and health.circuit_opened >= 1
    assert recorded.paused[messages[0].endpoint_id] > timezone.now()


def test_an_endpoint_failing_past_the_setting_is_disabled_and_its_messages_kept(make):
    message = make()
    EndpointHealth.objects.create(endpoint=message.endpoint, consecutive_failures=100,
                                  failing_since=timezone.now() - timedelta(days=6))
    taken, _ = take(message)
    recorded = webhook_call_record(results=[ended(taken[str(message.id)], AttemptOutcome.REFUSED, None)])
    assert recorded.disabled == [message.endpoint_id]
    endpoint = Endpoint.objects.get(pk=message.endpoint_id)
    assert not endpoint.is_active and endpoint.disabled_at is not None and "since" in endpoint.disabled_reason
    message.refresh_from_db()
    assert message.status == Status.PUBLISHED and message.attempts == 1  # kept, retried once enabled
    event = AuditEvent.objects.get(action="endpoint.disable")
    assert event.source == "platform" and event.object_id == str(endpoint.pk)


def test_a_call_handed_back_unattempted_only_gives_up_its_lease(make):
    message = make()
    taken, _ = take(message)
    recorded = webhook_call_record(results=[ended(taken[str(message.id)], called=False)])
    assert recorded.outcomes[str(message.id)].result is Result.BUSY
    message.refresh_from_db()
    assert message.call_lease_until is None and message.delivery_count == 0 and message.status == Status.PUBLISHED
    assert not MessageAttempt.objects.exists()


def test_a_result_under_a_lease_that_passed_and_was_taken_again_is_not_recorded(make):
    message = make()
    taken, _ = take(message)
    ScheduledMessage.objects.filter(pk=message.pk).update(call_lease_until=timezone.now() - timedelta(seconds=1))
    again, _ = take(message)  # another worker, after the first one's lease passed
    recorded = webhook_call_record(results=[ended(taken[str(message.id)])])
    assert recorded.outcomes[str(message.id)].result is Result.DUPLICATE
    message.refresh_from_db()
    assert message.status == Status.PUBLISHED and message.delivery_count == 2
    webhook_call_record(results=[ended(again[str(message.id)])])
    message.refresh_from_db()
    assert message.status == Status.DELIVERED
    assert MessageAttempt.objects.filter(message=message).count() == 2  # both calls were made


def _rows_read(sql: str, params: list) -> list[tuple]:
    """What a statement's executed plan read of the messages table: (node, index, rows) per node."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)

    def nodes(node):
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    return [(n["Node Type"], n.get("Index Name"), n["Actual Rows"] * n["Actual Loops"])
            for n in nodes(plan[0]["Plan"]) if n.get("Relation Name") == ScheduledMessage._meta.db_table
            or n.get("Index Name", "").startswith("message_")]


def test_the_take_and_its_record_reach_their_rows_by_id_however_many_are_in_flight(make):
    """The take's and the record's statements read each row by its id, never the rows in flight:
    during a burst the planner's statistics still say few are in flight (analyzed before it), and a
    plan driven by an in-flight index read the whole backlog for every batch of 64 (a 20,000 burst
    to one endpoint: ~6 ms a take, both PostgreSQL backends busy, 280 calls a second)."""
    from django.db import connection

    from scheduling.delivery.webhook_calls import _DELIVERED, _FAILED, _TAKE

    first = make(due_in=timedelta(milliseconds=-20))
    backlog = [ScheduledMessage(endpoint=first.endpoint, topology=first.topology, payload={}, requested_delay_ms=0,
                                due_at=first.due_at, status=Status.DELIVERED) for _ in range(3000)]
    ScheduledMessage.objects.bulk_create(backlog, batch_size=1000)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {ScheduledMessage._meta.db_table}")  # statistics: none of them in flight
    ScheduledMessage.objects.filter(id__in=[m.id for m in backlog]).update(status=Status.PUBLISHED)  # the burst
    ids = [str(m.id) for m in backlog[:5]]
    read = _rows_read(_TAKE, [ids, [0] * 5, [None] * 5, [None] * 5, [5.0] * 5, [None] * 5])
    assert read and all(rows <= 5 for *_, rows in read), read  # 5 rows taken, 5 read: not the 3,000 in flight
    leases = dict(ScheduledMessage.objects.filter(id__in=ids).values_list("id", "call_lease_until"))
    assert len(leases) == 5 and None not in leases.values()
    now = timezone.now()
    record = [[str(i) for i in leases], [0] * 5, list(leases.values()), [now] * 5, [1] * 5]
    read = _rows_read(_DELIVERED, ["w", *record, [None] * 5])
    assert read and all(rows <= 5 for *_, rows in read), read
    read = _rows_read(_FAILED, ["w", *record, ["failed"] * 5, [1] * 5, ["x"] * 5, [now] * 5])
    assert read and all(rows <= 5 for *_, rows in read), read

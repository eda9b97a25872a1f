"""Ordering keys against the real database (messages/ordering.py): a key's messages handed over one
at a time in due order, the early ones set waiting and woken once the one before them ended (by its
delivery, its webhook call's record, a cancel, or the sweep), and no statement more for messages
without a key."""

import threading
import time
from datetime import timedelta
from unittest import mock

import pytest
from django.core.cache import caches
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.delivery.services import Result, delivery_receive_many
from scheduling.delivery.webhook_calls import webhook_call_record, webhook_call_take
from scheduling.delivery.webhooks import Call, CallResult
from scheduling.messages.ordering import SWEEP_CURSOR, ordering_sweep
from scheduling.messages.services import message_cancel
from scheduling.models import AttemptOutcome, Endpoint, OrderingTurn, ScheduledMessage

Status = ScheduledMessage.Status


@pytest.fixture
def make(versions, endpoint_name):
    def make(handler="none", key="k", due_in=timedelta(milliseconds=-50), created_ago=timedelta(hours=1),
             status=Status.PUBLISHED):
        endpoint, _ = Endpoint.objects.get_or_create(
            name=f"{endpoint_name}-{handler}", defaults=dict(
                queue=f"{endpoint_name}-{handler}", topology=versions["v3"], handler=handler,
                handler_target="https://example.com/hook" if handler == "webhook" else "",
                webhook_secret="s" * 32))
        now = timezone.now()
        return ScheduledMessage.objects.create(
            endpoint=endpoint, topology=versions["v3"], payload={"n": 1}, due_at=now + due_in,
            requested_delay_ms=0, status=status, created_at=now - created_ago, ordering_key=key)

    return make


def receive(*messages):
    return [o.result for o in delivery_receive_many(items=[(str(m.id), 0) for m in messages])]


def statuses(*messages):
    return [ScheduledMessage.objects.get(id=m.id).status for m in messages]


@pytest.mark.django_db
def test_a_keyed_batch_is_delivered_in_its_keys_order_in_one_transaction(make):
    first = make(due_in=timedelta(milliseconds=-90))
    second, third = make(due_in=timedelta(milliseconds=-60)), make(due_in=timedelta(milliseconds=-30))
    other = make(key="other")
    assert receive(third, other, first, second) == [Result.DELIVERED] * 4
    assert statuses(first, second, third, other) == [Status.DELIVERED] * 4


@pytest.mark.django_db
def test_an_early_successor_waits_and_is_woken_when_the_one_before_it_is_delivered(
        make, django_capture_on_commit_callbacks):
    first, second = make(due_in=timedelta(milliseconds=-90)), make(due_in=timedelta(milliseconds=-60))
    assert receive(second) == [Result.WAITING]
    row = ScheduledMessage.objects.get(id=second.id)
    assert row.status == Status.WAITING and row.waiting_since is not None and row.delivery_count == 0
    assert receive(second) == [Result.WAITING]  # a stray copy leaves it waiting
    with mock.patch("scheduling.messages.relay.relay_publish") as publish, \
            django_capture_on_commit_callbacks(execute=True):
        assert receive(first) == [Result.DELIVERED]
    publish.assert_called_once_with(ids=[str(second.id)])  # woken, published after the commit
    row = ScheduledMessage.objects.get(id=second.id)
    assert row.status == Status.PENDING and row.waiting_since is not None  # the wait stays visible
    assert receive(second) == [Result.DELIVERED]
    row.refresh_from_db()
    assert row.lateness_ms >= (row.delivered_at - row.due_at) // timedelta(milliseconds=1) - 1  # the wait counts


@pytest.mark.django_db
def test_an_open_message_outside_the_batch_between_two_candidates_stops_only_the_later_one(make):
    """_EARLIER probes each key once (its first open message outside the batch) and compares it with
    every candidate: the one due before it goes, the one due after it waits."""
    early = make(due_in=timedelta(milliseconds=-90))
    outside = make(due_in=timedelta(milliseconds=-60))  # published, its copy not in this batch
    late = make(due_in=timedelta(milliseconds=-30))
    other = make(key="other", due_in=timedelta(milliseconds=-20))
    assert receive(late, other, early) == [Result.WAITING, Result.DELIVERED, Result.DELIVERED]
    assert statuses(early, outside, late, other) == [Status.DELIVERED, Status.PUBLISHED, Status.WAITING,
                                                     Status.DELIVERED]


@pytest.mark.django_db
def test_ties_go_by_creation(make):
    due = timedelta(milliseconds=-40)
    older = make(due_in=due, created_ago=timedelta(hours=2))
    newer = make(due_in=due)
    ScheduledMessage.objects.filter(id=newer.id).update(due_at=ScheduledMessage.objects.get(id=older.id).due_at)
    assert receive(newer) == [Result.WAITING]
    assert receive(older) == [Result.DELIVERED]


@pytest.mark.django_db
def test_messages_without_a_key_pay_no_statement_more(make):
    """The set-based path takes them: the same statements as before keys existed, none on the turns."""
    plain = [make(key=None) for _ in range(5)]
    with CaptureQueriesContext(connection) as queries:
        assert receive(*plain) == [Result.DELIVERED] * 5
    sql = [q["sql"] or "" for q in queries.captured_queries]
    assert not any("orderingturn" in s or "ordering_key" in s.replace("ordering_key IS NULL", "") for s in sql)
    assert len([s for s in sql if not s.startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]) == 1, sql
    calls = [make("webhook", key=None) for _ in range(3)]
    with CaptureQueriesContext(connection) as queries:
        taken, others = _take(*calls)
    assert len(taken) == 3 and others == {} and len(queries.captured_queries) == 1  # _TAKE alone


@pytest.mark.django_db
def test_the_sweep_leaves_a_fresh_wait_alone_and_wakes_an_old_lost_one(make):
    first, second = make(due_in=timedelta(milliseconds=-90)), make(due_in=timedelta(milliseconds=-60))
    assert receive(second) == [Result.WAITING]
    ScheduledMessage.objects.filter(id=first.id).update(status=Status.DELIVERED)  # ended, no wake (lost)
    assert ordering_sweep() == 0  # a wait of milliseconds: its wake is on its way
    ScheduledMessage.objects.filter(id=second.id).update(waiting_since=timezone.now() - timedelta(seconds=6))
    assert ordering_sweep() == 1 and statuses(second) == [Status.PENDING]


@pytest.mark.django_db
def test_the_sweep_goes_round_the_keys_so_a_backlog_does_not_hide_a_lost_wake(make):
    """Keys a to d each wait legitimately behind a live head (a backlog); z's head ended without a
    wake. Sweeping 2 keys at a time, each sweep starts after the last key the one before looked at:
    z is reached on the third sweep (taking the first 2 keys every time, it never would be)."""
    caches["throttle"].delete(SWEEP_CURSOR)  # a cursor another test's sweep left would shift the turns
    stale = timezone.now() - timedelta(seconds=6)
    for key in "abcd":
        make(key=key, due_in=timedelta(milliseconds=-90), status=Status.PUBLISHED)  # its head, not ended
        behind = make(key=key, due_in=timedelta(milliseconds=-60))
        assert receive(behind) == [Result.WAITING]
    head, lost = make(key="z", due_in=timedelta(milliseconds=-90)), make(key="z", due_in=timedelta(milliseconds=-60))
    assert receive(lost) == [Result.WAITING]
    ScheduledMessage.objects.filter(id=head.id).update(status=Status.DELIVERED)  # ended, its wake lost
    ScheduledMessage.objects.filter(status=Status.WAITING).update(waiting_since=stale)
    woken = [ordering_sweep(limit=2) for _ in range(3)]
    assert woken == [0, 0, 1] and statuses(lost) == [Status.PENDING]
    assert ScheduledMessage.objects.filter(status=Status.WAITING).count() == 4  # the backlogs still wait


@pytest.mark.django_db
def test_rescheduling_the_head_later_wakes_the_next(make):
    from scheduling.messages.services import message_reschedule

    first, second = make(due_in=timedelta(milliseconds=-90)), make(due_in=timedelta(milliseconds=-60))
    assert receive(second) == [Result.WAITING]
    message_reschedule(message_id=first.id, delay=60)
    assert statuses(first, second) == [Status.PENDING, Status.PENDING]


@pytest.mark.django_db
def test_cancelling_the_head_wakes_the_next(make):
    first, second = make(due_in=timedelta(milliseconds=-90)), make(due_in=timedelta(milliseconds=-60))
    assert receive(second) == [Result.WAITING]
    message_cancel(message_id=first.id)
    assert statuses(second) == [Status.PENDING]


@pytest.mark.django_db
def test_a_celery_task_holds_its_key_until_its_worker_reports_its_end(make, django_capture_on_commit_callbacks):
    from scheduling.delivery.handlers import TaskSends
    from scheduling.messages.ordering import ordering_task_ended

    first, second = make("celery_task", due_in=timedelta(milliseconds=-90)), make("celery_task",
                                                                                   due_in=timedelta(milliseconds=-60))
    Endpoint.objects.filter(id=first.endpoint_id).update(handler_target="testapp.record_receipt")
    with mock.patch("scheduling.delivery.services.send_celery_tasks", return_value=TaskSends()) as send:
        assert receive(first, second) == [Result.DELIVERED, Result.WAITING]  # one task of a key at a time
        assert [str(m.id) for m in send.call_args.args[0]] == [str(first.id)]
        turn = OrderingTurn.objects.get(key="k")
        assert str(turn.holder_id) == str(first.id) and turn.holder_until > timezone.now() + timedelta(minutes=14)
        ScheduledMessage.objects.filter(id=second.id).update(status=Status.PUBLISHED)  # a stray copy of it
        assert receive(second) == [Result.WAITING]  # the task is still running: delivered is not ended
        assert ordering_task_ended(message_id=str(first.id), retrying=True).woken == []  # a retry keeps the key
        with django_capture_on_commit_callbacks(execute=False):
            assert ordering_task_ended(message_id=str(first.id)).woken == [str(second.id)]
        assert receive(second) == [Result.DELIVERED]


def _take(*messages, attempt=0):
    return webhook_call_take(items=[(str(m.id), attempt, None, None) for m in messages],
                             deadlines={str(m.id): 5.0 for m in messages})


def _ended(taken, ok=True):
    call = Call(taken.message_id, taken.endpoint_id, 1, "https://example.com/hook", b"{}", {}, 5.0, (), 8)
    outcome, status = (AttemptOutcome.OK, 200) if ok else (AttemptOutcome.HTTP_STATUS, 500)
    return CallResult(call, time.time(), 12, outcome, status, "ok", None, True), taken


@pytest.mark.django_db
def test_a_webhook_key_has_one_call_out_at_a_time(make):
    first = make("webhook", due_in=timedelta(milliseconds=-90))
    second = make("webhook", due_in=timedelta(milliseconds=-60))
    taken, others = _take(first, second)
    assert list(taken) == [str(first.id)] and others[str(second.id)].result is Result.WAITING
    turn = OrderingTurn.objects.get(key="k")
    assert str(turn.holder_id) == str(first.id) and turn.holder_until == taken[str(first.id)].lease_until
    recorded = webhook_call_record(results=[_ended(taken[str(first.id)], ok=False)])  # a retry keeps the turn
    assert recorded.outcomes[str(first.id)].result is Result.RETRY
    assert statuses(first, second) == [Status.PUBLISHED, Status.WAITING]
    assert _take(second)[1][str(second.id)].result is Result.WAITING  # the head is retrying: still before it
    taken, _ = _take(first, attempt=1)  # its retry
    webhook_call_record(results=[_ended(taken[str(first.id)])])
    assert statuses(first, second) == [Status.DELIVERED, Status.PENDING]
    assert OrderingTurn.objects.get(key="k").holder_id is None
    taken, others = _take(second)
    assert list(taken) == [str(second.id)]


@pytest.mark.django_db
def test_cancelling_a_head_whose_call_is_out_keeps_the_key_until_the_call_is_recorded(make):
    first = make("webhook", due_in=timedelta(milliseconds=-90))
    second = make("webhook", due_in=timedelta(milliseconds=-60))
    taken, _ = _take(first)
    message_cancel(message_id=first.id)
    _, others = _take(second)
    assert others[str(second.id)].result is Result.WAITING  # the cancelled head's call may still be running
    assert ordering_sweep(older_than_s=0) == 0  # its lease is live
    webhook_call_record(results=[_ended(taken[str(first.id)])])
    assert statuses(first, second) == [Status.CANCELLED, Status.PENDING]


@pytest.mark.django_db
def test_the_sweep_wakes_a_lost_wake_and_lets_a_lapsed_holder_go(make):
    first = make("webhook", due_in=timedelta(milliseconds=-90))
    second = make("webhook", due_in=timedelta(milliseconds=-60))
    _take(first)
    _take(second)
    ScheduledMessage.objects.filter(id=first.id).update(status=Status.CANCELLED)  # ended without a wake
    assert ordering_sweep(older_than_s=0) == 0  # the holder's lease still runs
    OrderingTurn.objects.update(holder_until=timezone.now() - timedelta(seconds=1))  # the worker died
    assert ordering_sweep() == 1  # the lapsed holder's key, though its message waited only now
    assert statuses(second) == [Status.PENDING] and OrderingTurn.objects.get(key="k").holder_id is None


@pytest.mark.django_db(transaction=True)
def test_an_ender_and_a_newcomer_racing_never_leave_a_message_waiting(make):
    """Two connections behind a barrier: one delivers the head, the other the next message of the key.
    Whoever takes the key's turn second sees the first's commit: the next one is delivered or woken,
    never left waiting, and never delivered before the head was."""
    seen = set()
    for n in range(40):
        head = make(key=f"k{n}", due_in=timedelta(milliseconds=-90))
        nxt = make(key=f"k{n}", due_in=timedelta(milliseconds=-60))
        barrier, results = threading.Barrier(2), {}

        def run(message, name, barrier=barrier, results=results):  # this iteration's, bound now
            try:
                barrier.wait()
                results[name] = receive(message)[0]
            finally:
                connections.close_all()

        threads = [threading.Thread(target=run, args=(head, "head")), threading.Thread(target=run, args=(nxt, "next"))]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert results["head"] is Result.DELIVERED
        seen.add(results["next"])
        rows = {m.id: m for m in ScheduledMessage.objects.filter(id__in=[head.id, nxt.id])}
        if results["next"] is Result.DELIVERED:
            assert rows[nxt.id].status == Status.DELIVERED
        else:
            assert results["next"] is Result.WAITING and rows[nxt.id].status == Status.PENDING  # woken
    assert seen == {Result.DELIVERED, Result.WAITING}  # both orders happened


def _scans(plan: dict, table: str):
    """The plan's nodes that read ``table``, depth first."""
    if plan.get("Relation Name") == table:
        yield plan
    for child in plan.get("Plans", ()):
        yield from _scans(child, table)


@pytest.mark.django_db
def test_the_earlier_probe_runs_once_per_key_of_the_batch_not_per_candidate(make):
    """A batch of one deep key's copies pays the walk over the key's ended messages (index entries
    left until a vacuum: bench/explain_ordering.py) once. Counted in the executed plan, whatever scan
    the planner picks on so few rows; buffer_one's probe only for a key with such a candidate."""
    import json

    from scheduling.messages.ordering import _EARLIER, _earlier_params

    make(due_in=timedelta(milliseconds=-99))  # the key's head, outside the batch
    batch = [make(due_in=timedelta(milliseconds=-90 + n)) for n in range(6)] + [make(key="other")]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {_EARLIER}", _earlier_params(batch))
        found = cursor.fetchone()[0]
    plan = (json.loads(found) if isinstance(found, str) else found)[0]["Plan"]
    loops = [node["Actual Loops"] for node in _scans(plan, ScheduledMessage._meta.db_table)]
    assert sum(loops) == 2, loops  # the open-message probe, once for each of the 2 keys; no waiting probe

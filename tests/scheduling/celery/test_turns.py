"""Ordering keys on celery_queue endpoints, against the real database (celery/turns.py): the claim
takes the key's turn (GO runs and holds it, WAIT sets the row waiting, SKIP ends a schedule's run),
the task's end gives it back (the platform's task_postrun path, ordering_task_ended; a team's worker,
POST /api/messages/<id>/ended/), and a retry row's run holds its first run's turn."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.celery.services import celery_task_claim_message
from scheduling.core.lifecycle import Status
from scheduling.messages.ordering import ordering_task_ended
from scheduling.models import Endpoint, OrderingTurn, ScheduledMessage, Team
from scheduling.observability import metrics

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue_endpoint(versions):
    def make(team="default"):
        name = f"ep-{uuid.uuid4().hex[:10]}"
        return Endpoint.objects.create(name=name, queue=f"{team}--{name}", topology=versions["v2"],
                                       handler=Endpoint.Handler.CELERY_QUEUE,
                                       team=Team.objects.get_or_create(name=team)[0])

    return make


@pytest.fixture
def keyed(queue_endpoint, versions):
    """keyed(n, key="k", endpoint=None, idempotency_key=None, overlap=None) -> a task's row due n ms
    after a fixed time in the past (so the order of due times is the order of n)."""
    base = timezone.now() - timedelta(seconds=5)
    default = queue_endpoint()

    def make(n=0, key="k", endpoint=None, idempotency_key=None, overlap=None, status=Status.PUBLISHED):
        row_id = uuid.uuid4()
        return ScheduledMessage.objects.create(
            id=row_id, endpoint=endpoint or default, topology=versions["v2"],
            payload={"task": "testapp.plain_receipt"}, requested_delay_ms=0, due_at=base + timedelta(milliseconds=n),
            status=status, idempotency_key=idempotency_key or str(row_id), ordering_key=key, overlap=overlap,
            created_at=base - timedelta(hours=1))

    return make


def claim(row, redelivered=False):
    return celery_task_claim_message(message_id=str(row.id), redelivered=redelivered)


def stored(row) -> ScheduledMessage:
    return ScheduledMessage.objects.get(id=row.id)


def holder(row) -> str | None:
    turn = OrderingTurn.objects.filter(endpoint_id=row.endpoint_id, key=row.ordering_key).first()
    return str(turn.holder_id) if turn and turn.holder_id else None


def waits() -> float:
    return sum(s.value for m in metrics.ORDERING_WAITS.collect() for s in m.samples if s.name.endswith("_total"))


def test_the_first_of_a_key_runs_and_holds_it_the_next_waits_visibly_until_it_ends(
        keyed, django_capture_on_commit_callbacks):
    first, second = keyed(0), keyed(1)
    before = waits()
    taken = claim(first)
    assert (taken.run, taken.ordered) == (True, str(first.id))
    assert stored(first).status == Status.DELIVERED and holder(first) == str(first.id)
    with django_capture_on_commit_callbacks(execute=True):
        waiting = claim(second)
    assert (waiting.run, waiting.ordered, waiting.message.status) == (False, None, Status.WAITING)
    row = stored(second)
    assert row.status == Status.WAITING and row.waiting_since is not None
    assert (row.delivery_count, row.delivered_at) == (0, None)  # no hand-over recorded
    assert waits() == before + 1
    with django_capture_on_commit_callbacks(execute=True):
        assert claim(second).run is False  # a stray copy of a waiting row: left waiting, not counted again
    assert waits() == before + 1 and stored(second).status == Status.WAITING
    with django_capture_on_commit_callbacks(execute=False):  # the wake's publish is the relay's: not run here
        woken = ordering_task_ended(message_id=str(first.id)).woken
    assert woken == [str(second.id)] and stored(second).status == Status.PENDING and holder(first) is None
    again = claim(second)
    assert (again.run, again.ordered) == (True, str(second.id)) and holder(second) == str(second.id)
    assert stored(second).waiting_since is not None  # its wait stays visible


def test_a_later_copy_claimed_first_waits_for_the_earlier_one(keyed):
    first, second = keyed(0), keyed(1)
    assert claim(second).run is False and stored(second).status == Status.WAITING
    assert claim(first).run is True


def test_keys_are_independent(keyed):
    a, b = keyed(0, key="a"), keyed(1, key="b")
    assert claim(a).run is True and claim(b).run is True


def test_the_holder_s_redelivery_runs_its_duplicate_does_not(keyed):
    first, second = keyed(0), keyed(1)
    assert claim(first).run is True and claim(second).run is False
    rerun = claim(first, redelivered=True)
    assert (rerun.run, rerun.ordered) == (True, str(first.id))  # a worker died mid-run: not blocked by itself
    assert claim(first).run is False and stored(first).status == Status.DELIVERED  # a duplicate: not run
    assert holder(first) == str(first.id) and stored(second).status == Status.WAITING


def test_a_schedule_s_run_under_skip_ends_skipped_with_the_reason(keyed):
    key = "schedule:nightly"
    running, next_run = keyed(0, key=key, overlap="skip"), keyed(1, key=key, overlap="skip")
    assert claim(running).run is True
    skipped = claim(next_run)
    assert (skipped.run, skipped.message.status) == (False, Status.SKIPPED)
    row = stored(next_run)
    assert row.status == Status.SKIPPED and "skipped (overlap skip)" in row.last_error
    assert str(running.id) in row.last_error and row.delivery_count == 0


def test_a_retry_row_holds_its_first_run_s_turn(keyed, queue_endpoint):
    task_id = str(uuid.uuid4())
    first = keyed(0, idempotency_key=task_id)
    nxt = keyed(1)
    assert claim(first).run is True and claim(nxt).run is False
    assert ordering_task_ended(message_id=str(first.id), retrying=True).woken == []  # the retry keeps the key
    assert holder(first) == str(first.id) and stored(nxt).status == Status.WAITING
    retry = keyed(10_000, key=None, endpoint=first.endpoint, idempotency_key=f"{task_id}#retry1")
    taken = claim(retry)
    assert (taken.run, taken.ordered) == (True, str(first.id))
    other = keyed(0, key=None, endpoint=queue_endpoint(), idempotency_key=f"{task_id}#retry1")
    assert claim(other).ordered is None  # the same task id on another endpoint: not its first run
    assert ordering_task_ended(message_id=taken.ordered).woken == [str(nxt.id)]


def test_a_lapsed_hold_is_not_taken_back_by_a_late_retry_report(keyed):
    first = keyed(0)
    assert claim(first).run is True
    OrderingTurn.objects.filter(holder_id=first.id).update(holder_until=timezone.now() - timedelta(seconds=1))
    ordering_task_ended(message_id=str(first.id), retrying=True)
    assert holder(first) is None

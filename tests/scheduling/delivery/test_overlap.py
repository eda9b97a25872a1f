"""A recurring schedule's overlap policy against the real database (core/ordering.py,
messages/ordering.py, delivery/overlap.py): a run whose previous run has not ended is skipped (skip),
or waits, one at most, a later one skipped (buffer_one); a skipped run ends at once with the run
still running in last_error, and is counted on its schedule once the delivery commits."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.delivery.services import Result, delivery_receive_many
from scheduling.delivery.webhook_calls import webhook_call_record, webhook_call_take
from scheduling.delivery.webhooks import Call, CallResult
from scheduling.models import AttemptOutcome, Endpoint, Schedule, ScheduledMessage

Status = ScheduledMessage.Status
pytestmark = pytest.mark.django_db


@pytest.fixture
def run(versions, endpoint_name):
    """A run of schedule ``poll`` with the overlap policy ``overlap``, due ``due_in`` from now."""
    def run(overlap, handler="webhook", due_in=timedelta(milliseconds=-50)):
        endpoint, _ = Endpoint.objects.get_or_create(
            name=f"{endpoint_name}-{handler}", defaults=dict(
                queue=f"{endpoint_name}-{handler}", topology=versions["v3"], handler=handler,
                handler_target="https://example.com/hook" if handler == "webhook" else "",
                webhook_secret="s" * 32))
        Schedule.objects.get_or_create(team_id=endpoint.team_id, key="poll", defaults=dict(
            endpoint=endpoint, payload={}, interval_ms=60_000, overlap=overlap))
        now = timezone.now()
        return ScheduledMessage.objects.create(
            endpoint=endpoint, topology=versions["v3"], payload={"n": 1}, due_at=now + due_in,
            requested_delay_ms=0, status=Status.PUBLISHED, created_at=now - timedelta(hours=1),
            ordering_key="schedule:poll", overlap=overlap, schedule="poll")

    return run


def take(*messages):
    return webhook_call_take(items=[(str(m.id), 0, None, None) for m in messages],
                             deadlines={str(m.id): 5.0 for m in messages})


def ended(taken):
    call = Call(taken.message_id, taken.endpoint_id, 1, "https://example.com/hook", b"{}", {}, 5.0, (), 8)
    return CallResult(call, time.time(), 12, AttemptOutcome.OK, 200, "ok", None, True), taken


def rows(*messages):
    return [ScheduledMessage.objects.get(id=m.id) for m in messages]


def skipped_count():
    return Schedule.objects.get(key="poll").runs_overlap_skipped


def test_skip_ends_a_run_whose_previous_call_is_out(run, django_capture_on_commit_callbacks):
    first = run("skip", due_in=timedelta(milliseconds=-90))
    second = run("skip", due_in=timedelta(milliseconds=-60))
    taken, _ = take(first)
    with django_capture_on_commit_callbacks(execute=True):
        _, others = take(second)
    assert others[str(second.id)].result is Result.SKIPPED
    row = rows(second)[0]
    assert row.status == Status.SKIPPED and row.finished_at is not None and row.delivery_count == 0
    assert str(first.id) in row.last_error and "overlap skip" in row.last_error
    assert skipped_count() == 1
    webhook_call_record(results=[ended(taken[str(first.id)])])
    third = run("skip", due_in=timedelta(milliseconds=-30))
    assert list(take(third)[0]) == [str(third.id)]  # the previous run ended: the next one goes


def test_skip_on_a_record_only_endpoint_skips_a_run_while_an_earlier_one_is_open(
        run, django_capture_on_commit_callbacks):
    first = run("skip", handler="none", due_in=timedelta(milliseconds=-90))
    second = run("skip", handler="none", due_in=timedelta(milliseconds=-60))
    with django_capture_on_commit_callbacks(execute=True):
        results = [o.result for o in delivery_receive_many(items=[(str(second.id), 0)])]
    assert results == [Result.SKIPPED] and [r.status for r in rows(first, second)] == [Status.PUBLISHED,
                                                                                       Status.SKIPPED]
    assert skipped_count() == 1
    # in one batch, a record-only run ends at its hand-over: the next one goes after it
    third = run("skip", handler="none", due_in=timedelta(milliseconds=-30))
    results = [o.result for o in delivery_receive_many(items=[(str(third.id), 0), (str(first.id), 0)])]
    assert results == [Result.DELIVERED, Result.DELIVERED]


def test_buffer_one_keeps_one_run_waiting_skips_the_next_and_wakes_the_buffered_one(
        run, django_capture_on_commit_callbacks):
    first = run("buffer_one", due_in=timedelta(milliseconds=-90))
    second = run("buffer_one", due_in=timedelta(milliseconds=-60))
    third = run("buffer_one", due_in=timedelta(milliseconds=-30))
    taken, _ = take(first)
    with django_capture_on_commit_callbacks(execute=True):
        _, others = take(second, third)  # in one batch: the first waits, the next finds it waiting
    assert [others[str(m.id)].result for m in (second, third)] == [Result.WAITING, Result.SKIPPED]
    assert "already waiting" in rows(third)[0].last_error
    fourth = run("buffer_one", due_in=timedelta(milliseconds=-10))
    with django_capture_on_commit_callbacks(execute=True):
        assert take(fourth)[1][str(fourth.id)].result is Result.SKIPPED  # a later batch: still one waiting
    assert skipped_count() == 2
    webhook_call_record(results=[ended(taken[str(first.id)])])
    assert [r.status for r in rows(first, second, third, fourth)] == [
        Status.DELIVERED, Status.PENDING, Status.SKIPPED, Status.SKIPPED]  # the buffered run woken
    assert list(take(second)[0]) == [str(second.id)]


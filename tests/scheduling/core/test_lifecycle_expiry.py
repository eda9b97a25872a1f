"""Expiry in the lifecycle (issue 49): a message past its expires_at is never handed over, ends
expired (final, never retried), and a copy of an expired row is dropped with nothing recorded.
Pure: no database."""

from datetime import datetime, timedelta, timezone

import pytest

from scheduling.core import lifecycle
from scheduling.core.lifecycle import Arrival, Event, State, Status

P, U, D, C, F, X = (Status.PENDING, Status.PUBLISHED, Status.DELIVERED, Status.CANCELLED, Status.FAILED,
                    Status.EXPIRED)
NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
DUE = NOW - timedelta(seconds=10)
SECOND = timedelta(seconds=1)


def test_the_new_final_statuses_are_finished_and_not_in_flight():
    assert {Status.EXPIRED, Status.SUPERSEDED} <= lifecycle.FINISHED
    assert not lifecycle.FINISHED & lifecycle.IN_FLIGHT
    assert lifecycle.LATER_FINISHED_VALUES == {"expired", "superseded", "skipped"}  # skipped: 0035
    # the history index lists the first three by value; the second index the later ones: together, all
    assert set().union(*lifecycle.FINISHED_BY_INDEX) == lifecycle.FINISHED_VALUES
    assert lifecycle.FINISHED_BY_INDEX[0] == {"cancelled", "delivered", "failed"}


@pytest.mark.parametrize("status", [P, U])
def test_a_copy_arriving_at_or_after_expiry_expires_the_message_and_is_not_handed_over(status):
    for expires_at in (NOW, NOW - SECOND):
        state = State(status=status, due_at=DUE, expires_at=expires_at)
        arrival, change = lifecycle.arrive(state, attempt=0, now=NOW)
        assert arrival is Arrival.EXPIRED
        assert change["status"] == X and change["finished_at"] == NOW and "expired at" in change["last_error"]
        assert "delivered_at" not in change and "delivery_count" not in change


def test_a_copy_arriving_before_expiry_is_delivered():
    state = State(status=U, due_at=DUE, expires_at=NOW + SECOND)
    assert lifecycle.arrive(state, attempt=0, now=NOW)[0] is Arrival.DELIVER
    assert lifecycle.arrive(State(status=U, due_at=DUE), attempt=0, now=NOW)[0] is Arrival.DELIVER  # no expiry


def test_a_retry_copy_past_expiry_expires_the_message():
    state = State(status=U, due_at=DUE, attempts=2, expires_at=NOW - SECOND)
    assert lifecycle.arrive(state, attempt=2, now=NOW)[0] is Arrival.EXPIRED
    # a stale retry copy stays a duplicate: it is not the current attempt
    assert lifecycle.arrive(state, attempt=1, now=NOW) == (Arrival.DUPLICATE, {})


@pytest.mark.parametrize("status", [Status.EXPIRED, Status.SUPERSEDED])
@pytest.mark.parametrize("attempt", [0, 1])
def test_a_copy_of_a_row_already_ended_so_is_dropped_and_nothing_is_recorded(status, attempt):
    state = State(status=status, due_at=DUE, attempts=attempt, delivery_count=0, expires_at=NOW - SECOND)
    arrival, change = lifecycle.arrive(state, attempt=attempt, now=NOW, redelivered=True, rerun_redelivered=True)
    assert arrival is (Arrival.EXPIRED if status == X else Arrival.SUPERSEDED) and change == {}


def test_a_delivered_message_is_not_expired_by_a_late_redelivery():
    """Once handed over, expiry no longer applies: a Celery rerun after a crash is the task's own."""
    state = State(status=D, due_at=DUE, delivery_count=1, expires_at=NOW - SECOND)
    assert lifecycle.arrive(state, attempt=0, now=NOW, redelivered=True, rerun_redelivered=True)[0] is Arrival.DELIVER


def test_a_failed_handler_whose_retry_would_land_after_expiry_expires_instead_of_retrying():
    state = State(status=D, due_at=DUE, attempts=0, expires_at=NOW + 2 * SECOND)
    event, change = lifecycle.handler_failed(state, error="boom", max_retries=5, now=NOW, retry_at=NOW + 4 * SECOND)
    assert event is Event.EXPIRE
    assert change["status"] == X and change["attempts"] == 1 and change["finished_at"] == NOW
    assert change["last_error"].startswith("handler attempt 1: boom; expired at")
    # a retry due before expiry is a retry
    event, change = lifecycle.handler_failed(state, error="boom", max_retries=5, now=NOW, retry_at=NOW + SECOND)
    assert (event, change["status"]) == (Event.RETRY, U)


def test_a_failed_handler_out_of_retries_fails_even_with_an_expiry():
    state = State(status=D, due_at=DUE, attempts=5, expires_at=NOW + SECOND)
    assert lifecycle.handler_failed(state, error="x", max_retries=5, now=NOW, retry_at=NOW + 9 * SECOND)[0] \
        is Event.GIVE_UP


@pytest.mark.parametrize("status", [D, C, F, X])
def test_only_what_is_in_flight_or_being_handled_can_expire(status):
    if status == D:
        assert lifecycle.transition(status, Event.EXPIRE) == X
        return
    with pytest.raises(lifecycle.IllegalTransition):
        lifecycle.expire(State(status=status, due_at=DUE, expires_at=NOW), now=NOW)


@pytest.mark.parametrize(("expires_at", "valid"), [(None, True), (DUE + timedelta(milliseconds=1), True),
                                                  (DUE, False), (DUE - SECOND, False)])
def test_an_expiry_must_come_after_the_due_time(expires_at, valid):
    assert lifecycle.expiry_valid(due_at=DUE, expires_at=expires_at) is valid

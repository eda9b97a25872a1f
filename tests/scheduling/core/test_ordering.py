"""core/ordering.py and the lifecycle's waiting transitions: pure truth tables."""

from datetime import datetime, timedelta, timezone

import pytest

from scheduling.core import lifecycle
from scheduling.core.lifecycle import Event, IllegalTransition, Status
from scheduling.core.ordering import Holder, Turn, key_problem, turn

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
LIVE, LAPSED = NOW + timedelta(seconds=5), NOW - timedelta(seconds=1)


@pytest.mark.parametrize("holder, earlier_open, expected", [
    (Holder(), False, Turn.GO),  # nobody holds it, nothing before it: its turn
    (Holder(), True, Turn.WAIT),  # an earlier message of the key is still open
    (Holder("other", LIVE), False, Turn.WAIT),  # another message's call is still out (even once cancelled)
    (Holder("other", LAPSED), False, Turn.GO),  # its lease passed: a dead worker does not block the key
    (Holder("other", LAPSED), True, Turn.WAIT),
    (Holder("mine", LIVE), False, Turn.GO),  # its own hold is no obstacle
    (Holder("mine", LIVE), True, Turn.WAIT),
])
def test_turn(holder, earlier_open, expected):
    assert turn(mine="mine", holder=holder, earlier_open=earlier_open, now=NOW) is expected


@pytest.mark.parametrize("key, ok", [("a", True), ("k" * 200, True), ("", False), ("k" * 201, False),
                                     ("a\x00b", False), (7, False), (None, False)])
def test_key_problem(key, ok):
    assert (key_problem(key) is None) is ok


@pytest.mark.parametrize("event, source, target", [
    (Event.WAIT, Status.PENDING, Status.WAITING), (Event.WAIT, Status.PUBLISHED, Status.WAITING),
    (Event.WAKE, Status.WAITING, Status.PENDING), (Event.CANCEL, Status.WAITING, Status.CANCELLED),
    (Event.RESCHEDULE, Status.WAITING, Status.PENDING), (Event.EXPIRE, Status.WAITING, Status.EXPIRED),
    (Event.DELIVER, Status.WAITING, Status.DELIVERED),  # its turn came when a copy of it arrived
])
def test_waiting_transitions(event, source, target):
    assert lifecycle.transition(source, event) is target


@pytest.mark.parametrize("event, source", [(Event.WAIT, Status.DELIVERED), (Event.WAIT, Status.WAITING),
                                           (Event.WAKE, Status.PENDING), (Event.WAKE, Status.CANCELLED)])
def test_illegal_waiting_transitions(event, source):
    with pytest.raises(IllegalTransition):
        lifecycle.transition(source, event)


def test_waiting_is_neither_in_flight_nor_finished_but_open_for_its_key():
    assert Status.WAITING not in lifecycle.IN_FLIGHT | lifecycle.FINISHED
    assert lifecycle.ORDER_OPEN == {Status.PENDING, Status.PUBLISHED, Status.WAITING}


def test_wait_keeps_the_first_waiting_since_and_wake_publishes_again():
    state = lifecycle.State(status=Status.PUBLISHED, due_at=NOW)
    assert lifecycle.wait(state, now=NOW) == {"status": Status.WAITING, "waiting_since": NOW}

    class Row:
        status, due_at, waiting_since = Status.PENDING, NOW, NOW - timedelta(seconds=3)

    assert lifecycle.wait(Row(), now=NOW) == {"status": Status.WAITING}  # woken once, waiting again
    assert lifecycle.wake(lifecycle.State(status=Status.WAITING, due_at=NOW)) == {
        "status": Status.PENDING, "published_at": None}


def test_a_copy_of_a_waiting_row_is_a_delivery_candidate_and_expires_past_its_expiry():
    waiting = lifecycle.State(status=Status.WAITING, due_at=NOW, expires_at=NOW + timedelta(seconds=1))
    assert lifecycle.arrive(waiting, attempt=0, now=NOW)[0] is lifecycle.Arrival.DELIVER
    kind, change = lifecycle.arrive(waiting, attempt=0, now=NOW + timedelta(seconds=2))
    assert kind is lifecycle.Arrival.EXPIRED and change["status"] is Status.EXPIRED

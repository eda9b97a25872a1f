"""core/ordering.py's overlap (a recurring schedule's runs) and the lifecycle's skip: pure truth tables."""

from datetime import datetime, timedelta, timezone

import pytest

from scheduling.core import lifecycle
from scheduling.core.lifecycle import State, Status
from scheduling.core.ordering import (
    KEY_MAX_CHARS,
    Holder,
    Overlap,
    Turn,
    key_problem,
    schedule_key,
    skip_reason,
    turn,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
LIVE = NOW + timedelta(seconds=5)


@pytest.mark.parametrize("overlap, holder, earlier_open, buffered, expected", [
    # its turn: every policy sends it
    (Overlap.SKIP, Holder(), False, False, Turn.GO),
    (Overlap.BUFFER_ONE, Holder(), False, True, Turn.GO),
    # the previous run still out (its call, its task) or still open
    (Overlap.SKIP, Holder("previous", LIVE), False, False, Turn.SKIP),
    (Overlap.SKIP, Holder(), True, False, Turn.SKIP),
    (Overlap.BUFFER_ONE, Holder("previous", LIVE), False, False, Turn.WAIT),  # the first one waits
    (Overlap.BUFFER_ONE, Holder(), True, False, Turn.WAIT),
    (Overlap.BUFFER_ONE, Holder("previous", LIVE), False, True, Turn.SKIP),  # one already waits
    (Overlap.BUFFER_ONE, Holder(), True, True, Turn.SKIP),
    # a plain ordering key (no policy) always waits
    (None, Holder("previous", LIVE), True, True, Turn.WAIT),
])
def test_turn_with_overlap(overlap, holder, earlier_open, buffered, expected):
    assert turn(mine="mine", holder=holder, earlier_open=earlier_open, now=NOW, overlap=overlap,
                buffered=buffered) is expected


def test_a_callers_key_may_not_take_the_schedules_prefix_the_platform_may():
    assert "platform's" in key_problem("schedule:nightly")
    assert key_problem("schedule:nightly", platform=True) is None
    assert key_problem("schedules-are-fine") is None


def test_a_schedules_key_fits_the_column_and_stays_its_own():
    assert schedule_key("nightly") == "schedule:nightly"
    long_a, long_b = schedule_key("a" * 200), schedule_key("a" * 199 + "b")
    assert len(long_a) <= KEY_MAX_CHARS and len(long_b) <= KEY_MAX_CHARS and long_a != long_b
    assert key_problem(long_a, platform=True) is None


def test_skip_ends_a_run_with_the_reason():
    for status in (Status.PENDING, Status.PUBLISHED, Status.WAITING):
        change = lifecycle.skip(State(status=status, due_at=NOW), now=NOW, reason="why")
        assert change == {"status": Status.SKIPPED, "finished_at": NOW, "last_error": "why"}
    with pytest.raises(lifecycle.IllegalTransition):
        lifecycle.skip(State(status=Status.DELIVERED, due_at=NOW), now=NOW, reason="why")
    assert Status.SKIPPED in lifecycle.FINISHED and Status.SKIPPED in lifecycle.LATER_FINISHED


def test_the_reason_names_the_run_still_running():
    assert "run r1 had not ended" in skip_reason(overlap="skip", running="r1", buffered=False)
    assert "already waiting" in skip_reason(overlap="buffer_one", running="r1", buffered=True)

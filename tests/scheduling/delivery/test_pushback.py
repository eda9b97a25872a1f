"""Retry-After, the circuit and disabling, by table."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.delivery import pushback
from scheduling.delivery.pushback import Health

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("value, expected", [
    ("3", 3.0), (" 120 ", 120.0), ("0", 0.0), ("999999", 3600.0),
    ("Thu, 26 Nov 2026 12:00:30 GMT", 30.0), ("Thu, 26 Nov 2026 11:00:00 GMT", 0.0),
    (None, None), ("", None), ("soon", None), ("-5", None), ("1.5", None), ("9" * 65, None),
])
def test_retry_after(value, expected):
    assert pushback.retry_after_seconds(value, now=NOW, longest=3600) == expected


def test_a_long_header_is_refused_in_linear_time():
    assert pushback.retry_after_seconds("1" * 10_000_000, now=NOW, longest=60) is None


def test_the_circuit_opens_at_the_threshold_and_doubles_each_reopening():
    health, pauses, now = Health(), [], NOW
    for _ in range(5):
        change = pushback.after_failure(health, now=now, error="webhook answered 500", retry_after_s=None,
                                        circuit_failures=3, circuit_seconds=30)
        health = Health(change["consecutive_failures"], change["failing_since"], change["paused_until"],
                        change["circuit_opened"])
        pauses.append(None if health.paused_until is None else health.paused_until - now)
        now = max(now, health.paused_until or now) + timedelta(seconds=1)  # each probe after the pause
    assert pauses == [None, None, timedelta(seconds=30), timedelta(seconds=60), timedelta(seconds=120)]
    assert health.failing_since == NOW and health.consecutive_failures == 5


def test_failures_of_calls_already_out_do_not_reopen_an_open_circuit():
    open_until = NOW + timedelta(seconds=30)
    change = pushback.after_failure(Health(consecutive_failures=3, paused_until=open_until, circuit_opened=1),
                                    now=NOW, error="x", retry_after_s=None, circuit_failures=3, circuit_seconds=30)
    assert change["paused_until"] == open_until and change["circuit_opened"] == 1
    assert change["consecutive_failures"] == 4


def test_the_open_pause_stops_growing_at_ten_minutes():
    change = pushback.after_failure(Health(consecutive_failures=50, circuit_opened=40), now=NOW, error="x",
                                    retry_after_s=None, circuit_failures=3, circuit_seconds=30)
    assert change["paused_until"] == NOW + timedelta(minutes=10)


def test_retry_after_pauses_below_the_threshold_and_the_longer_pause_wins():
    change = pushback.after_failure(Health(), now=NOW, error="429", retry_after_s=3, circuit_failures=10,
                                    circuit_seconds=30)
    assert change["paused_until"] == NOW + timedelta(seconds=3) and change["circuit_opened"] == 0
    change = pushback.after_failure(Health(consecutive_failures=9), now=NOW, error="429", retry_after_s=3,
                                    circuit_failures=10, circuit_seconds=30)
    assert change["paused_until"] == NOW + timedelta(seconds=30)


def test_no_circuit_when_its_threshold_is_zero():
    change = pushback.after_failure(Health(consecutive_failures=10**6), now=NOW, error="x", retry_after_s=None,
                                    circuit_failures=0, circuit_seconds=30)
    assert change["paused_until"] is None and change["circuit_opened"] == 0


def test_a_success_closes_everything():
    assert pushback.after_success(now=NOW) == {"consecutive_failures": 0, "failing_since": None, "paused_until": None,
                                               "circuit_opened": 0, "last_success_at": NOW}


@pytest.mark.parametrize("since, after, expected", [
    (NOW - timedelta(days=5, seconds=1), timedelta(days=5), True),
    (NOW - timedelta(days=4), timedelta(days=5), False),
    (None, timedelta(days=5), False),
    (NOW - timedelta(days=500), None, False),
])
def test_disable_after_failing_that_long(since, after, expected):
    assert pushback.should_disable(Health(failing_since=since), now=NOW, disable_after=after) is expected

"""Debounce's pure rules (scheduling/core/debounce.py): what a request may say, and the due time
and window it gives."""

from datetime import datetime, timedelta, timezone

import pytest

from scheduling.core.debounce import (
    Debounce,
    Mode,
    leading_open,
    parse,
    reschedule_error,
    trailing_due,
    window_until,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)
MAX = 3600


def test_a_full_trailing_debounce_parses():
    assert parse({"key": "doc-1", "seconds": 5, "max_seconds": 60, "mode": "trailing"}, max_delay_s=MAX) == (
        Debounce(key="doc-1", seconds=5, mode=Mode.TRAILING, max_seconds=60), {})


def test_mode_defaults_to_trailing_and_leading_takes_no_cap():
    assert parse({"key": "k", "seconds": 5, "max_seconds": 5}, max_delay_s=MAX)[0].mode == Mode.TRAILING
    assert parse({"key": "k", "seconds": 5, "mode": "leading"}, max_delay_s=MAX)[0] == Debounce("k", 5, Mode.LEADING)
    assert parse(None, max_delay_s=MAX) == (None, {})


@pytest.mark.parametrize(("value", "field", "reason"), [
    ("doc", "debounce", "must be an object"),
    ({"key": "k", "seconds": 1, "max_seconds": 2, "extra": 1}, "debounce", "unknown field(s): extra"),
    ({"key": "", "seconds": 1, "max_seconds": 2}, "debounce.key", "1 to 200 characters"),
    ({"key": "k" * 201, "seconds": 1, "max_seconds": 2}, "debounce.key", "1 to 200 characters"),
    ({"key": 7, "seconds": 1, "max_seconds": 2}, "debounce.key", "must be a string"),
    ({"key": "a\x00b", "seconds": 1, "max_seconds": 2}, "debounce.key", "without control characters"),
    ({"key": "a\nb", "seconds": 1, "max_seconds": 2}, "debounce.key", "without control characters"),
    ({"key": " k", "seconds": 1, "max_seconds": 2}, "debounce.key", "outer spaces"),
    ({"key": "k", "seconds": 0, "max_seconds": 2}, "debounce.seconds", "from 1 to 3,600 s"),
    ({"key": "k", "seconds": -1, "max_seconds": 2}, "debounce.seconds", "from 1 to 3,600 s"),
    ({"key": "k", "seconds": 1.5, "max_seconds": 2}, "debounce.seconds", "whole number"),
    ({"key": "k", "seconds": True, "max_seconds": 2}, "debounce.seconds", "whole number"),
    ({"key": "k", "seconds": 3601, "max_seconds": 3601}, "debounce.seconds", "longest delay"),
    ({"key": "k", "seconds": 5, "max_seconds": 4}, "debounce.max_seconds", "from seconds to 3,600 s"),
    ({"key": "k", "seconds": 5, "max_seconds": 3601}, "debounce.max_seconds", "from seconds to 3,600 s"),
    ({"key": "k", "seconds": 5}, "debounce.max_seconds", "required for mode trailing"),
    ({"key": "k", "seconds": 5, "max_seconds": 9, "mode": "leading"}, "debounce.max_seconds", "trailing only"),
    ({"key": "k", "seconds": 5, "mode": "both"}, "debounce.mode", "one of trailing, leading"),
])
def test_a_bad_debounce_names_its_field_and_why(value, field, reason):
    parsed, errors = parse(value, max_delay_s=MAX)
    assert parsed is None
    assert reason in errors[field]


def test_a_new_window_ends_at_the_cap_when_trailing_and_after_seconds_when_leading():
    assert window_until(Debounce("k", 5, Mode.TRAILING, 60), now=T0) == T0 + 60 * S
    assert window_until(Debounce("k", 5, Mode.LEADING), now=T0) == T0 + 5 * S


@pytest.mark.parametrize(("asked", "now", "until", "due"), [
    (T0, T0, T0 + 60 * S, T0 + 5 * S),  # seconds after the newest
    (T0 + 3 * S, T0 + 3 * S, T0 + 60 * S, T0 + 8 * S),
    (T0 + 57 * S, T0 + 57 * S, T0 + 60 * S, T0 + 60 * S),  # never past the cap
    (T0 + 70 * S, T0 + 70 * S, T0 + 60 * S, T0 + 70 * S),  # past the cap: due at once (its own time)
    (T0 + 30 * S, T0, T0 + 60 * S, T0 + 30 * S),  # its own delay is a floor
])
def test_trailing_due_is_seconds_after_the_newest_never_past_the_cap_nor_before_its_own_time(asked, now, until, due):
    assert trailing_due(asked=asked, now=now, seconds=5, until=until) == due


def test_a_leading_window_is_open_until_its_end():
    assert leading_open(until=T0 + 5 * S, now=T0 + 4 * S)
    assert not leading_open(until=T0 + 5 * S, now=T0 + 5 * S)
    assert not leading_open(until=None, now=T0)


@pytest.mark.parametrize(("mode", "until", "due_at", "refused"), [
    ("trailing", T0 + 60 * S, T0 + 60 * S, False),  # at the cap: kept
    ("trailing", T0 + 60 * S, T0 + 60 * S + timedelta(milliseconds=1), True),  # a millisecond past it
    ("trailing", T0 + 60 * S, T0, False),  # earlier: always
    ("leading", T0 + 5 * S, T0 + 3600 * S, False),  # a leading window has no cap on its first
    (None, None, T0 + 3600 * S, False),  # no debounce
])
def test_a_reschedule_of_a_trailing_message_is_refused_past_its_cap_only(mode, until, due_at, refused):
    error = reschedule_error(mode=mode, until=until, due_at=due_at)
    assert (error is not None) == refused
    if refused:
        assert "debounce.until" in error and "2026-11-29T12:01:00Z" in error

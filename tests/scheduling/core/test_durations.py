"""Durations in settings: 90s, 15m, 12h, 7d (fractions allowed), or off where a setting allows it."""

from datetime import timedelta

import pytest

from scheduling.core.durations import format_duration, parse_duration, parse_duration_or_off


@pytest.mark.parametrize(("text", "span"), [
    ("90s", timedelta(seconds=90)), ("15m", timedelta(minutes=15)), ("12h", timedelta(hours=12)),
    ("7d", timedelta(days=7)), (" 1.5h ", timedelta(minutes=90)), ("0s", timedelta(0)), ("7D", timedelta(days=7)),
])
def test_durations(text, span):
    assert parse_duration(text, name="X") == span


@pytest.mark.parametrize("text", ["7", "7 days", "d", "-1d", "1w", "", "1h30m", "off"])
def test_what_is_not_a_duration_names_the_setting(text):
    with pytest.raises(ValueError, match=r"^X must be a duration such as 90s, 15m, 12h or 7d, not "):
        parse_duration(text, name="X")


def test_off_where_allowed():
    assert parse_duration_or_off("OFF", name="X") is None and parse_duration_or_off("1h", name="X") == timedelta(hours=1)
    with pytest.raises(ValueError, match=r"^X must be a duration such as 90s, 15m, 12h or 7d, or off, not 'never'$"):
        parse_duration_or_off("never", name="X")


@pytest.mark.parametrize(("span", "text"), [
    (timedelta(days=7), "7d"), (timedelta(hours=36), "36h"), (timedelta(minutes=15), "15m"),
    (timedelta(seconds=90), "90s"), (timedelta(seconds=1.5), "1.5s"),
])
def test_formatted_in_the_largest_whole_unit(span, text):
    assert format_duration(span) == text

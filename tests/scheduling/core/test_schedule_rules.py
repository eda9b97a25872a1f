"""scheduling/core/schedule_rules.py: run times of cron rules in a timezone (daylight saving on both
change days) and of intervals, the runs a downtime missed, and the checks' field errors. Pure."""

from collections import Counter
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.core.exceptions import ValidationError

from scheduling.core import schedule_rules as rules
from scheduling.core.schedule_rules import Rule

UTC = dt_timezone.utc


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_daily_0230_in_berlin_runs_at_0300_on_the_spring_forward_day():
    """29 March 2026: clocks jump from 02:00 to 03:00 (CET -> CEST); 02:30 does not exist."""
    runs = rules.preview(Rule(cron="30 2 * * *", tz="Europe/Berlin"), after=at("2026-03-27T12:00Z"), count=4)
    assert runs == [at("2026-03-28T01:30Z"),  # 02:30 CET
                    at("2026-03-29T01:00Z"),  # 03:00 CEST: the first valid time after the gap
                    at("2026-03-30T00:30Z"),  # 02:30 CEST
                    at("2026-03-31T00:30Z")]


def test_a_daily_0230_in_berlin_runs_once_on_the_fall_back_day():
    """25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 happens twice, the rule runs at the first."""
    runs = rules.preview(Rule(cron="30 2 * * *", tz="Europe/Berlin"), after=at("2026-10-24T12:00Z"), count=3)
    assert runs == [at("2026-10-25T00:30Z"), at("2026-10-26T01:30Z"), at("2026-10-27T01:30Z")]


def test_an_hourly_rule_runs_in_both_repeated_hours_like_cron():
    runs = rules.preview(Rule(cron="15 * * * *", tz="Europe/Berlin"), after=at("2026-10-24T23:30Z"), count=4)
    assert runs == [at("2026-10-24T23:15Z") + timedelta(hours=h) for h in (1, 2, 3, 4)]
    assert [r.astimezone(rules.ZoneInfo("Europe/Berlin")).strftime("%H:%M%z") for r in runs] == \
        ["02:15+0200", "02:15+0100", "03:15+0100", "04:15+0100"]


def test_new_york_springs_forward_on_its_own_day():
    runs = rules.preview(Rule(cron="30 2 * * *", tz="America/New_York"), after=at("2026-03-07T12:00Z"), count=2)
    assert runs == [at("2026-03-08T07:00Z"), at("2026-03-09T06:30Z")]  # 03:00 EDT, then 02:30 EDT


def test_interval_runs_from_their_anchor_with_millisecond_steps():
    rule = Rule(interval_ms=1500, anchor=at("2026-01-01T00:00:00Z"))
    assert rules.preview(rule, after=at("2026-01-01T00:00:02Z"), count=3) == [
        at("2026-01-01T00:00:03Z"), at("2026-01-01T00:00:04.500Z"), at("2026-01-01T00:00:06Z")]
    assert next(rule.runs_after(at("2026-01-01T00:00:03Z"), inclusive=True)) == at("2026-01-01T00:00:03Z")
    assert next(rule.runs_after(at("2026-01-01T00:00:03Z"))) == at("2026-01-01T00:00:04.500Z")
    assert rules.preview(rule, after=at("2025-12-31T00:00:00Z"), count=1) == [at("2026-01-01T00:00:00Z")]


def test_start_and_end_bound_the_runs():
    rule = Rule(cron="0 * * * *", start=at("2026-01-01T03:00Z"), end=at("2026-01-01T05:00Z"))
    assert rules.preview(rule, after=at("2026-01-01T00:00Z"), count=10) == [
        at("2026-01-01T03:00Z"), at("2026-01-01T04:00Z"), at("2026-01-01T05:00Z")]
    assert rule.next_run(at("2026-01-01T05:00Z")) is None


def test_missed_counts_the_runs_of_a_downtime_and_names_the_latest():
    rule = Rule(cron="*/5 * * * *")
    assert rule.missed(at("2026-01-01T00:05Z"), at("2026-01-01T01:02Z")) == (12, at("2026-01-01T01:00Z"))
    # past the cap, the latest is found without walking to it
    assert rule.missed(at("2026-01-01T00:05Z"), at("2026-01-01T01:02Z"), cap=3) == (3, at("2026-01-01T01:00Z"))
    interval = Rule(interval_ms=1500, anchor=at("2026-01-01T00:00Z"))
    assert interval.missed(at("2026-01-01T00:00Z"), at("2026-01-01T00:00:10Z")) == (7, at("2026-01-01T00:00:09Z"))
    assert interval.missed(at("2026-01-01T00:00Z"), at("2026-01-01T00:00:10Z"), cap=2) == \
        (2, at("2026-01-01T00:00:09Z"))
    assert rule.missed(at("2026-01-01T00:05Z"), at("2026-01-01T00:04Z")) == (0, None)


@pytest.mark.parametrize(("expression", "text"), [
    ("", "five fields"), ("* * * *", "has 4 fields"), ("0 0 * * * *", "has 6 fields"), ("@daily", "has 1 fields"),
    ("61 * * * *", "bad minute"), ("0 0 30 2 *", "bad day-of-month"), ("x y z a b", "not valid"),
])
def test_a_bad_cron_expression_is_a_cron_error(expression, text):
    with pytest.raises(ValidationError) as caught:
        rules.cron_check(expression)
    assert text in caught.value.message_dict["cron"][0]


def test_cron_is_trimmed_to_single_spaces():
    assert rules.cron_check("  30  2 * *   1-5 ") == "30 2 * * 1-5"


@pytest.mark.parametrize("name", ["Mars/Olympus", "../etc/passwd", "", None, "europe/berlin"])
def test_an_unknown_timezone_is_a_timezone_error(name):
    with pytest.raises(ValidationError) as caught:
        rules.timezone_check(name)
    assert "timezone" in caught.value.message_dict["timezone"][0]


@pytest.mark.parametrize(("seconds", "expected"), [(1, 1000), ("1.5", 1500), (0.0015 * 1000, 1500), (86400, 86_400_000),
                                                    ("2.0004", 2000)])
def test_interval_seconds_become_milliseconds(seconds, expected):
    assert rules.interval_check(seconds) == expected


@pytest.mark.parametrize(("seconds", "text"), [(0.5, "at least 1 s"), (0, "at least 1 s"), (-3, "at least 1 s"),
                                               ("nan", "finite"), ("x", "number"), (10**12, "at most"),
                                               (True, "number")])
def test_a_bad_interval_is_an_interval_seconds_error(seconds, text):
    with pytest.raises(ValidationError) as caught:
        rules.interval_check(seconds)
    assert text in caught.value.message_dict["interval_seconds"][0]


def test_runs_stop_at_the_largest_date_instead_of_failing():
    late = at("9999-12-31T23:00:00Z")
    assert rules.preview(Rule(cron="0 * * * *"), after=late, count=5) == []
    assert rules.preview(Rule(interval_ms=7200_000, anchor=late), after=late, count=5) == []
    assert rules.preview(Rule(cron="0 * * * *", start=late), after=at("2026-01-01T00:00:00Z"), count=3) == [late]


# Jitter: an offset per run, fixed (a hash of the schedule and the run's time), within [0, jitter)

def test_a_runs_jitter_is_fixed_per_run_and_within_the_window():
    run = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    offsets = [rules.jitter_offset_ms(seed="1:nightly", run_at=run + timedelta(minutes=k), jitter_ms=30_000)
               for k in range(500)]
    again = [rules.jitter_offset_ms(seed="1:nightly", run_at=run + timedelta(minutes=k), jitter_ms=30_000)
             for k in range(500)]
    assert offsets == again  # asked again (a retried pass, a second materialiser): the same offset
    assert all(0 <= o < 30_000 for o in offsets)
    assert len(set(offsets)) > 450  # not one offset for every run
    assert rules.jitter_offset_ms(seed="1:nightly", run_at=run, jitter_ms=None) == 0
    assert rules.jitter_offset_ms(seed="1:nightly", run_at=run, jitter_ms=0) == 0
    assert rules.jitter_offset_ms(seed="1:nightly", run_at=run, jitter_ms=1) == 0


def test_the_runs_of_many_schedules_at_one_minute_spread_over_the_window():
    run = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    offsets = [rules.jitter_offset_ms(seed=f"1:s{i}", run_at=run, jitter_ms=60_000) for i in range(1000)]
    buckets = Counter(o * 10 // 60_000 for o in offsets)
    assert len(buckets) == 10  # every tenth of the minute gets runs
    assert all(60 <= n <= 140 for n in buckets.values()), buckets  # about 100 each, none crowded


@pytest.mark.parametrize(("check", "value", "expected"), [
    (rules.jitter_check, 0, 0), (rules.jitter_check, "1.5", 1500), (rules.jitter_check, 86_400, 86_400_000),
    (rules.catchup_check, 0, 0), (rules.catchup_check, 3600, 3_600_000), (rules.catchup_check, 31 * 86_400,
                                                                           31 * 86_400_000),
])
def test_jitter_and_catchup_are_milliseconds_within_their_bounds(check, value, expected):
    assert check(value) == expected


@pytest.mark.parametrize(("check", "field", "value", "text"), [
    (rules.jitter_check, "jitter_seconds", -1, "0 or more"),
    (rules.jitter_check, "jitter_seconds", 86_401, "at most 86,400 s (a day)"),
    (rules.jitter_check, "jitter_seconds", "soon", "a number of seconds"),
    (rules.jitter_check, "jitter_seconds", True, "a number of seconds"),
    (rules.catchup_check, "catchup_seconds", "NaN", "finite"),
    (rules.catchup_check, "catchup_seconds", 31 * 86_400 + 1, "at most 2,678,400 s (31 days)"),
])
def test_bad_jitter_and_catchup_name_their_field(check, field, value, text):
    with pytest.raises(ValidationError) as caught:
        check(value)
    assert text in caught.value.message_dict[field][0]


def test_a_runs_time_is_read_from_its_key():
    assert rules.run_time_of_key("schedule:poll.x:3:1796007600250") == at("2026-11-30T03:00:00.250Z")
    assert [rules.run_time_of_key(k) for k in (None, "", "mine:1", "schedule:a:1:x", "schedule:a:1:" + "9" * 16)] \
        == [None] * 5

"""The soak's plan and its flat rule (bench/soak_rules.py): when rows and faults fall, which row is
the base, and what counts as flat; the settings' one-line errors."""

import pytest

from bench.soak_rules import Plan, SoakConfigError, clock, judge_flat, plan_from_env


def test_the_hour_as_the_issue_describes_it():
    plan = plan_from_env({})
    assert (plan.minutes, plan.rate, plan.max_delay_s, plan.retention_s, plan.prune_every_s) == (60, 300, 300, 120, 60)
    assert [t / 60 for t in plan.sample_times] == [5 * i for i in range(1, 13)]
    # every 10 minutes, half a row after a row, so no row reads a worker that has just started
    assert [t / 60 for t in plan.kill_times] == [12.5, 22.5, 32.5, 42.5, 52.5]
    assert plan.restart_at / 60 == 37.5  # once, in the judged half, between two rows and two kills
    assert plan.window_s / 60 == 9  # 5 min delay + 2 min retention + 2 x 1 min prune period
    assert plan.warm_up_s / 60 == 18  # two windows: the rows' mix, then the indexes' size
    assert plan.base_index == 3  # the 20-minute row
    assert plan.judged_indices == [6, 7, 8, 9, 10, 11]  # 35 to 60 minutes


def test_the_base_is_the_first_row_at_or_after_the_warm_up():
    plan = Plan(minutes=3, max_delay_s=20, retention_s=10, prune_every_s=4)  # warm-up 2 x 38 s, rows every 15 s
    assert plan.sample_times[plan.base_index] == 90
    assert Plan(minutes=3, max_delay_s=20, retention_s=10, prune_every_s=2.5).base_index == 4  # exactly 75 s


@pytest.mark.parametrize(("environ", "message"), [
    ({"SOAK_MINUTES": "abc"}, "SOAK_MINUTES must be a number of minutes such as 60, not 'abc'"),
    ({"SOAK_MINUTES": "0"}, "SOAK_MINUTES must be from 1 up, not '0'"),
    ({"SOAK_MINUTES": "nan"}, "SOAK_MINUTES must be from 1 up, not 'nan'"),
    ({"SOAK_MINUTES": "35"}, "SOAK_MINUTES=35 is too short"),
    ({"SOAK_RATE": "1.5"}, "SOAK_RATE must be a whole number of messages a second, not '1.5'"),
    ({"SOAK_RATE": "9000"}, "SOAK_RATE must be from 1 to 5000, not '9000'"),
    ({"SOAK_CANCEL_SHARE": "1"}, "SOAK_CANCEL_SHARE must be from 0 to 0.9, not '1'"),
    ({"SOAK_RETENTION": "2x"}, "SOAK_RETENTION must be a duration such as 90s, 15m, 12h or 7d, not '2x'"),
    ({"SOAK_PRUNE_EVERY": "0s"}, "SOAK_PRUNE_EVERY must be longer than 0, not '0s'"),
    ({"SOAK_MAX_DELAY": "0.5s"}, "SOAK_MAX_DELAY must be at least 1s"),
])
def test_bad_settings_are_one_line_naming_the_setting(environ, message):
    with pytest.raises(SoakConfigError) as caught:
        plan_from_env(environ)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_short_run_is_allowed_once_its_warm_up_fits_in_the_first_half():
    plan = plan_from_env({"SOAK_MINUTES": "36"})
    assert plan.sample_times[plan.base_index] <= plan.seconds / 2


def test_flat_within_ten_percent_of_the_base():
    values = [50, 100, 104, 98, 109, 107]
    j = judge_flat("rss", values, base_index=1, judged=[3, 4, 5])
    assert j.ok and (j.base, j.highest, j.highest_index) == (100, 109, 4) and not j.fell


def test_growth_beyond_ten_percent_is_a_miss_naming_the_row():
    j = judge_flat("table", [100, 100, 105, 111], base_index=0, judged=[2, 3])
    assert not j.ok and j.highest_index == 3
    assert "highest +11.0 % in row 4" in j.describe()


def test_a_fall_is_reported_but_not_a_leak():
    j = judge_flat("connections", [11, 11, 7, 9], base_index=1, judged=[2, 3])
    assert j.ok and j.fell and "fell to 7 in row 3 (-36.4 %)" in j.describe()


def test_slack_for_a_figure_about_zero():
    assert judge_flat("outbox", [0, 0, 12, 40], base_index=1, judged=[2, 3], slack=40).ok
    assert not judge_flat("outbox", [0, 0, 12, 41], base_index=1, judged=[2, 3], slack=40).ok
    assert not judge_flat("outbox", [0, 0, 0, 1], base_index=1, judged=[2, 3]).ok  # no slack: 0 must stay 0


def test_clock():
    assert [clock(s) for s in (0, 15, 75, 300, 2250, 3600)] == ["0:00", "0:15", "1:15", "5:00", "37:30", "60:00"]

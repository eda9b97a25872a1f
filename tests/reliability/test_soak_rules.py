"""The soak's plan and its flat rule (tests/reliability/soak/rules.py): when rows, faults and VACUUMs fall, which row is
the base, and what counts as flat; the settings' one-line errors."""

import pytest

from tests.reliability.soak.plateau import cycle_ends, judge_bound, judge_plateau, series
from tests.reliability.soak.rules import Plan, SoakConfigError, clock, judge_flat, plan_from_env


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


# The table's plateau (tests/reliability/soak/plateau.py): synthetic series, one sample a row. ``passes``: the
# vacuum passes completed so far; a row where it rose is a cycle end.
STEADY_LIVE = [5_000] * 8
EVERY_ROW = list(range(1, 9))


def test_the_soak_vacuums_before_the_base_row_halfway_and_the_last():
    assert plan_from_env({}).vacuum_rows == (3, 7, 11)  # 20:00, 40:00 and 60:00 of the hour
    assert Plan(minutes=3, max_delay_s=20, retention_s=10, prune_every_s=4).vacuum_rows == (5, 8, 11)


def test_steady_sizes_are_bounded_across_cycles():
    p = judge_plateau("heap", [100] * 8, STEADY_LIVE, EVERY_ROW, base_index=2)
    assert p.ok and p.rule == "across cycles" and p.cycles == 5 and p.new_highs == 0 and p.grew == 0
    assert "across cycles, bounded: 5 complete vacuum cycles" in p.describe()


def test_a_saw_tooth_back_at_its_mark_after_each_vacuum_is_bounded():
    sizes = [100, 120, 140, 100, 120, 140, 100, 120]  # a pass before rows 1, 4, 7 (index 0, 3, 6)
    passes = [1, 1, 1, 2, 2, 2, 3, 3]
    p = judge_plateau("table", sizes, STEADY_LIVE, passes, base_index=0)
    assert p.ok and p.ends == (0, 3, 6) and p.cycles == 2 and p.new_highs == 0 and p.grew == 0


def test_a_lagging_vacuum_that_catches_up_is_bounded():
    # no pass for three rows (a busy machine): the heap steps up to 140, then stays, as vacuum frees
    # the dead versions and new rows reuse their space
    sizes = [100, 100, 118, 135, 140, 140, 139, 140]
    passes = [1, 2, 2, 2, 3, 4, 5, 6]
    p = judge_plateau("heap", sizes, STEADY_LIVE, passes, base_index=0)
    assert p.ok and p.rule == "across cycles" and p.new_highs == 0
    # caught up only at the last cycle but one: one new high, not two; still bounded
    p = judge_plateau("heap", [100, 100, 130, 150, 150], [5_000] * 5, [1, 2, 2, 3, 4], base_index=0)
    assert p.ok and p.new_highs == 1 and p.grew == 0.5


def test_growth_across_cycles_with_steady_live_rows_fails():
    sizes = [100, 100, 115, 130, 145, 160, 175, 190]  # +15 every cycle, under the 2x ceiling
    p = judge_plateau("heap", sizes, STEADY_LIVE, EVERY_ROW, base_index=1)
    assert not p.ok and p.growing and p.bound.ok and p.new_highs == 2
    assert round(p.grew, 3) == round(190 / 160 - 1, 3)
    assert "across cycles, GREW" in p.describe()


def test_growth_that_the_live_rows_explain_is_for_the_live_rows_bound():
    sizes = [100, 100, 115, 130, 145, 160, 175, 190]
    live = [5_000 * s // 100 for s in sizes]  # as many more messages held: not a leak of the table's space
    assert judge_plateau("heap", sizes, live, EVERY_ROW, base_index=1).ok
    assert not judge_bound("live rows", [5_000, 5_000, 7_000, 10_001], base_index=1).ok  # over 2x: the prune lags


def test_pages_taken_one_at_a_time_are_not_growth():
    sizes = [100, 100.1, 100.2, 100.3, 100.4]  # a new high every cycle, 0.3 % in all
    p = judge_plateau("heap", sizes, [5_000] * 5, [1, 2, 3, 4, 5], base_index=0)
    assert p.ok and p.new_highs == 2


def test_an_index_gets_one_more_cycle_before_its_freed_pages_are_reused():
    sizes, passes = [100, 100, 100, 120, 135], [1, 2, 3, 4, 5]
    assert not judge_plateau("heap", sizes, [5_000] * 5, passes, base_index=0).ok
    index = judge_plateau("indexes", sizes, [5_000] * 5, passes, base_index=0, settle=2)
    assert index.ok and index.needed == 3 and index.new_highs == 2
    # the same growth one cycle longer is growth
    assert not judge_plateau("indexes", sizes + [150], [5_000] * 6, passes + [6], base_index=0, settle=2).ok


def test_too_few_cycles_judge_the_bound_only_and_say_so():
    passes = [1, 1, 2, 2, 2, 2, 3, 3]  # a pass before rows 3 and 7 only: one complete cycle from the base
    p = judge_plateau("heap", [100, 100, 100, 150, 170, 190, 190, 195], STEADY_LIVE, passes, base_index=2)
    assert p.ok and p.rule == "bound only" and p.cycles == 1 and not p.growing
    assert p.describe(lambda v: f"{v:g}").startswith(
        "bound only: 1 complete vacuum cycle after warm-up, the cross-cycle rule needs 2; 100 at warm-up, "
        "highest after it 195 (+95.0 %) in row 8, ceiling 2x = 200")
    over = judge_plateau("heap", [100, 100, 100, 150, 170, 190, 190, 201], STEADY_LIVE, passes, base_index=2)
    assert not over.ok and not over.bound.ok and over.rule == "bound only"


def test_the_ceiling_applies_across_cycles_too():
    sizes = [100, 100, 150, 210, 210, 210]  # bounded after the step, but the step is beyond any lag
    p = judge_plateau("heap", sizes, [5_000] * 6, [1, 2, 3, 4, 5, 6], base_index=1)
    assert not p.growing and not p.ok and p.bound.highest == 210


def test_cycle_ends_and_the_printed_series():
    assert cycle_ends([0, 1, 1, 3, 3, 4], base_index=2) == [3, 5]
    assert series([1, 2, 3, 4], [1, 1, 2, 2], base_index=2) == "1* 2 | 3* 4"

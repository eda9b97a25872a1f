"""Each transformation of the Spark job on hand-built rows, against the expected DataFrame."""

from datetime import timedelta

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from scheduling.reports.accuracy import (
    ALL,
    COUNTS,
    REPORT_COLUMNS,
    accuracy_report,
    lateness_bin,
    lateness_histogram,
    read_facts,
    with_delay_bucket,
    with_outcomes,
)
from tests.scheduling.reports.conftest import DAY, NOON, fact

AS_OF = NOON + timedelta(hours=1)
GRACE = timedelta(minutes=10)


def report_row(endpoint=ALL, version=ALL, bucket=ALL, mode=ALL, lateness=(None,) * 5, team="default",
               **counts) -> Row:
    """An expected report row for DAY: counts default to 0, lateness = (min, p50, p95, p99, max)."""
    values = {
        "day": DAY,
        "team": team,
        "endpoint": endpoint,
        "version": version,
        "delivery_mode": mode,
        "delay_bucket": bucket,
        **{name: counts.get(name, 0) for name in COUNTS},
    }
    values.update(
        zip(
            ("lateness_min_ms", "lateness_p50_ms", "lateness_p95_ms", "lateness_p99_ms", "lateness_max_ms"),
            lateness,
        )
    )
    values.setdefault("throttled_max_ms", counts.get("throttled_max_ms"))
    return Row(**{name: values[name] for name in REPORT_COLUMNS})


def test_delay_buckets_include_their_lower_bound(facts):
    delays = {
        0: "<1s",
        999: "<1s",
        1_000: "1-10s",
        9_999: "1-10s",
        10_000: "10-60s",
        59_999: "10-60s",
        60_000: "1-10min",
        599_999: "1-10min",
        600_000: "10-60min",
        3_599_999: "10-60min",
        3_600_000: "1-24h",
        86_399_999: "1-24h",
        86_400_000: ">=1d",
        268_435_455_000: ">=1d",
    }
    rows = facts(*(fact(i, requested_delay_ms=delay) for i, delay in enumerate(delays)))
    assertDataFrameEqual(
        with_delay_bucket(rows).select("requested_delay_ms", "delay_bucket"),
        [Row(requested_delay_ms=delay, delay_bucket=bucket) for delay, bucket in delays.items()],
    )


def test_outcomes_flag_each_kind_of_message(facts):
    undelivered = {"delivered_at": None, "lateness_ms": None, "delivery_count": 0}
    rows = facts(
        fact(0),
        fact(1, delivery_count=2),  # a duplicate is still one delivery
        fact(2, lateness_ms=-3),  # early
        fact(3, status="cancelled", cancelled_at=NOON, **{**undelivered, "delivery_count": 1}),
        fact(4, status="failed", **undelivered),  # e.g. unroutable: failed with a reason, not lost
        fact(5, status="published", **undelivered),  # due an hour ago and never arrived
        fact(3300, status="pending", **undelivered),  # due 5 minutes before AS_OF: within the grace
        fact(7200, status="published", **undelivered),  # not due yet
        fact(6, status="failed", delivery_count=1),  # arrived, then the handler gave up
        fact(8, status="expired", **undelivered),  # past its expires_at: accounted for, not lost
        fact(9, status="waiting", **undelivered),  # an hour overdue, waiting for its ordering key's turn: not lost
    )
    flags = ("delivered", "cancelled", "failed", "lost", "in_flight", "duplicates", "early", "expired")
    expected = {
        "m0": (1, 0, 0, 0, 0, 0, 0, 0, 4),
        "m1": (1, 0, 0, 0, 0, 1, 0, 0, 4),
        "m2": (1, 0, 0, 0, 0, 0, 1, 0, -3),
        "m3": (0, 1, 0, 0, 0, 0, 0, 0, None),
        "m4": (0, 0, 1, 0, 0, 0, 0, 0, None),
        "m5": (0, 0, 0, 1, 0, 0, 0, 0, None),
        "m3300": (0, 0, 0, 0, 1, 0, 0, 0, None),
        "m7200": (0, 0, 0, 0, 1, 0, 0, 0, None),
        "m6": (1, 0, 1, 0, 0, 0, 0, 0, 4),
        "m8": (0, 0, 0, 0, 0, 0, 0, 1, None),
        "m9": (0, 0, 0, 0, 1, 0, 0, 0, None),
    }
    assertDataFrameEqual(
        with_outcomes(rows, as_of=AS_OF, lost_after=GRACE).select("id", *flags, "arrival_lateness_ms"),
        [Row(id=i, **dict(zip((*flags, "arrival_lateness_ms"), v))) for i, v in expected.items()],
    )


def test_scheduled_in_the_past_is_flagged_and_late_only_since_it_was_accepted(facts):
    """Lateness of a backdated message counts from created_at, even when the stored value was
    recorded from the past due time (before that rule); it is lost only once overdue from then."""
    accepted = NOON + timedelta(minutes=55)  # 5 minutes before AS_OF: within the grace
    backdated = {"due_at": NOON - timedelta(days=1), "created_at": accepted}
    rows = facts(
        fact(0, **backdated, delivered_at=accepted + timedelta(milliseconds=3), lateness_ms=86_400_000 + 3_300_003),
        fact(1, **backdated, status="published", delivered_at=None, delivery_count=0),
        fact(2, due_at=NOON, created_at=NOON, lateness_ms=4),  # a delay of 0: not in the past
        fact(3, created_at=None),  # exported before created_at was: not in the past
    )
    names = ("scheduled_in_past", "early", "lost", "in_flight", "arrival_lateness_ms")
    assertDataFrameEqual(
        with_outcomes(rows, as_of=AS_OF, lost_after=GRACE).select("id", *names),
        [Row(id="m0", **dict(zip(names, (1, 0, 0, 0, 3)))), Row(id="m1", **dict(zip(names, (1, 0, 0, 1, None)))),
         Row(id="m2", **dict(zip(names, (0, 0, 0, 0, 4)))), Row(id="m3", **dict(zip(names, (0, 0, 0, 0, 4))))],
    )
    (overall,) = accuracy_report(rows, as_of=AS_OF, lost_after=GRACE).where(
        "team = '*' AND version = '*' AND delay_bucket = '*'").collect()
    assert (overall.scheduled_in_past, overall.lateness_max_ms) == (2, 4)


def test_a_wait_for_flow_control_is_counted_apart_and_taken_off_the_lateness(facts):
    rows = facts(
        fact(0, delivered_at=NOON + timedelta(milliseconds=9_006), lateness_ms=9_006, throttled_ms=9_000),
        fact(1, delivered_at=NOON + timedelta(milliseconds=2_103), lateness_ms=2_103, throttled_ms=2_100),
        fact(2, lateness_ms=4),  # not throttled
        fact(3, throttled_ms=None),  # facts from before flow control: null
    )
    names = ("throttled", "arrival_lateness_ms", "throttled_wait_ms")
    assertDataFrameEqual(
        with_outcomes(rows, as_of=AS_OF, lost_after=GRACE).select("id", *names),
        [Row(id="m0", throttled=1, arrival_lateness_ms=6, throttled_wait_ms=9_000),
         Row(id="m1", throttled=1, arrival_lateness_ms=3, throttled_wait_ms=2_100),
         Row(id="m2", throttled=0, arrival_lateness_ms=4, throttled_wait_ms=None),
         Row(id="m3", throttled=0, arrival_lateness_ms=4, throttled_wait_ms=None)],
    )
    (overall,) = accuracy_report(rows, as_of=AS_OF, lost_after=GRACE).where(
        "team = '*' AND version = '*' AND delay_bucket = '*'").collect()
    assert (overall.throttled, overall.throttled_max_ms, overall.lateness_max_ms) == (2, 9_000, 6)


def test_lateness_bins_are_exact_below_ten_seconds_and_three_digits_above(spark):
    values = [None, 0, 5, -5, 9_999, -9_999, 10_000, 12_345, -12_345, 987_654, 86_400_123]
    binned = [None, 0, 5, -5, 9_999, -9_999, 10_000, 12_300, -12_300, 988_000, 86_400_000]
    df = spark.createDataFrame([(v,) for v in values], "lateness_ms long")
    assertDataFrameEqual(
        df.select("lateness_ms", lateness_bin(df.lateness_ms).alias("bin")),
        [Row(lateness_ms=v, bin=b) for v, b in zip(values, binned)],
    )


def test_histogram_counts_outcomes_per_group_and_lateness_bin(facts):
    rows = facts(
        fact(0),
        fact(1),
        fact(2, lateness_ms=7, delivery_count=2),
        fact(3, status="published", delivered_at=None, delivery_count=0),
    )
    histogram = lateness_histogram(with_outcomes(with_delay_bucket(rows), as_of=AS_OF, lost_after=GRACE))
    common = {
        "day": DAY,
        "team": "default",
        "endpoint": "billing",
        "version": "v2",
        "delivery_mode": "native",
        "delay_bucket": "1-10s",
        "cancelled": 0,
        "failed": 0,
        "in_flight": 0,
        "early": 0,
    }
    names = ("lateness_bin", "scheduled", "delivered", "lost", "duplicates", "lateness_n", "lateness_min_ms",
             "lateness_max_ms")  # fmt: skip
    expected = [(4, 2, 2, 0, 0, 2, 4, 4), (7, 1, 1, 0, 1, 1, 7, 7), (None, 1, 0, 1, 0, 0, None, None)]
    assertDataFrameEqual(
        histogram.select(*common, *names), [Row(**common, **dict(zip(names, values))) for values in expected]
    )


def test_report_has_group_rows_and_rollups_per_endpoint_version_bucket_and_day_of_the_team_and_platform(facts):
    rows = facts(
        fact(0, lateness_ms=4),
        fact(1, lateness_ms=6, delivery_count=2),
        fact(2, lateness_ms=-3),
        fact(3, requested_delay_ms=500, status="cancelled", delivered_at=None, cancelled_at=NOON),
        fact(4, endpoint="audit", version="v1", lateness_ms=20),
        fact(5, endpoint="audit", version="v1", status="published", delivered_at=None),
    )
    billing = {
        "scheduled": 3,
        "delivered": 3,
        "duplicates": 1,
        "early": 1,
        "lateness": (-3, 4.0, 5.8, 5.96, 6),
    }
    cancelled = {"scheduled": 1, "cancelled": 1}
    audit = {"scheduled": 2, "delivered": 1, "lost": 1, "lateness": (20, 20.0, 20.0, 20.0, 20)}
    everything = {
        "scheduled": 5,
        "delivered": 4,
        "lost": 1,
        "duplicates": 1,
        "early": 1,
        "lateness": (-3, 5.0, 17.9, 19.58, 20),
    }
    expected = [
        report_row("billing", "v2", "1-10s", "native", **billing),
        report_row("billing", "v2", "<1s", "native", **cancelled),
        report_row("audit", "v1", "1-10s", "native", **audit),
        report_row("billing", **{**billing, "scheduled": 4, "cancelled": 1}),
        report_row("audit", **audit),
        report_row(version="v2", **{**billing, "scheduled": 4, "cancelled": 1}),
        report_row(version="v1", **audit),
        report_row(bucket="1-10s", **everything),
        report_row(bucket="<1s", **cancelled),
        report_row(**{**everything, "scheduled": 6, "cancelled": 1}),
    ]
    # one team: the platform-wide rows (team *) are its rollups by version, bucket and day again
    expected += [
        report_row(version="v2", team=ALL, **{**billing, "scheduled": 4, "cancelled": 1}),
        report_row(version="v1", team=ALL, **audit),
        report_row(bucket="1-10s", team=ALL, **everything),
        report_row(bucket="<1s", team=ALL, **cancelled),
        report_row(team=ALL, **{**everything, "scheduled": 6, "cancelled": 1}),
    ]
    actual = accuracy_report(rows, as_of=AS_OF, lost_after=GRACE)
    assert tuple(actual.columns) == REPORT_COLUMNS
    assertDataFrameEqual(actual, expected)


def test_two_teams_with_an_endpoint_billing_get_rows_and_rollups_of_their_own(facts):
    """Endpoint names are unique within a team only: each team's billing is its own group and
    its own rollups; the platform-wide rows (team *) add them up but never name an endpoint."""
    rows = facts(
        fact(0, team="a", lateness_ms=4),
        fact(1, team="a", lateness_ms=6),
        fact(2, team="b", lateness_ms=20),
        fact(3, team="b", status="published", delivered_at=None, delivery_count=0),  # lost
    )
    a = {"scheduled": 2, "delivered": 2, "lateness": (4, 5.0, 5.9, 5.98, 6)}
    b = {"scheduled": 2, "delivered": 1, "lost": 1, "lateness": (20, 20.0, 20.0, 20.0, 20)}
    platform = {"scheduled": 4, "delivered": 3, "lost": 1, "lateness": (4, 6.0, 18.6, 19.72, 20)}
    per_team = [
        report_row(team=team, **figures, **dimensions)
        for team, figures in (("a", a), ("b", b))
        for dimensions in ({"endpoint": "billing", "version": "v2", "bucket": "1-10s", "mode": "native"},
                           {"endpoint": "billing"}, {"version": "v2"}, {"bucket": "1-10s"}, {})
    ]
    platform_wide = [report_row(team=ALL, **platform, **dimensions)
                     for dimensions in ({"version": "v2"}, {"bucket": "1-10s"}, {})]
    assertDataFrameEqual(accuracy_report(rows, as_of=AS_OF, lost_after=GRACE), per_team + platform_wide)


def test_the_rollups_are_the_team_rollups_then_the_platform_ones():
    from scheduling.reports import facts as selectors
    from scheduling.reports.accuracy import DIMENSIONS, PLATFORM_ROLLUPS, ROLLUPS, TEAM_ROLLUPS

    assert DIMENSIONS == selectors.REPORT_DIMENSIONS
    assert ROLLUPS == (*(("team", *r) for r in TEAM_ROLLUPS), *PLATFORM_ROLLUPS)
    # the admin knows which slices have rows (reports/facts.py cannot import pyspark)
    assert selectors.TEAM_SLICES == {frozenset(r) for r in TEAM_ROLLUPS}
    assert selectors.PLATFORM_SLICES == {frozenset(r) for r in PLATFORM_ROLLUPS}
    assert all("endpoint" not in r for r in PLATFORM_ROLLUPS)  # an endpoint name is unique in its team only


def test_facts_without_a_team_column_are_the_default_teams(spark, facts, tmp_path):
    """Facts exported and archive files written before teams have no team column: the job reads
    them beside newer files and counts their messages as the default team's."""
    next_day = NOON + timedelta(days=1)
    facts(fact(0), fact(1)).drop("team").write.partitionBy("due_date").parquet(str(tmp_path / "facts"))
    facts(fact(2, team="a", due_at=next_day, due_date=next_day.date())).write.mode("append").partitionBy(
        "due_date").parquet(str(tmp_path / "facts"))
    old_file = next((tmp_path / "facts" / f"due_date={DAY}").glob("*.parquet"))
    assert "team" not in spark.read.parquet(str(old_file)).columns

    read = read_facts(spark, str(tmp_path / "facts"), DAY, next_day.date())
    assert sorted((r.id, r.team) for r in read.collect()) == [("m0", None), ("m1", None), ("m2", "a")]
    report = accuracy_report(read, as_of=next_day + timedelta(hours=1), lost_after=GRACE)
    overall = {(r.day, r.team): r.scheduled for r in report.where("endpoint = '*' AND version = '*' AND "
                                                                  "delay_bucket = '*'").collect()}
    assert overall == {(DAY, "default"): 2, (DAY, ALL): 2, (next_day.date(), "a"): 1, (next_day.date(), ALL): 1}


def test_the_job_names_the_platforms_default_team():
    from scheduling.models import teams as models
    from scheduling.reports.accuracy import DEFAULT_TEAM
    assert DEFAULT_TEAM == models.DEFAULT_TEAM


def test_percentiles_interpolate_between_exact_milliseconds(facts):
    rows = facts(*(fact(i, lateness_ms=i + 1) for i in range(100)))
    report = accuracy_report(rows, as_of=AS_OF, lost_after=GRACE)
    (overall,) = report.where("team = '*' AND version = '*' AND delay_bucket = '*'").collect()
    assert (overall.lateness_min_ms, overall.lateness_p50_ms, overall.lateness_max_ms) == (1, 50.5, 100)
    assert round(overall.lateness_p95_ms, 6) == 95.05 and round(overall.lateness_p99_ms, 6) == 99.01


def test_an_empty_day_gives_no_rows(facts):
    report = accuracy_report(facts(), as_of=AS_OF, lost_after=GRACE)
    assert tuple(report.columns) == REPORT_COLUMNS
    assert report.count() == 0


def test_read_facts_keeps_only_the_requested_days(spark, facts, tmp_path):
    next_day = NOON + timedelta(days=1)
    facts(fact(0), fact(1), fact(2, due_at=next_day, due_date=next_day.date())).write.partitionBy(
        "due_date"
    ).parquet(str(tmp_path / "facts"))
    read = read_facts(spark, str(tmp_path / "facts"), DAY, DAY)
    assert sorted(r.id for r in read.collect()) == ["m0", "m1"]
    assert (
        read_facts(spark, str(tmp_path / "facts"), DAY + timedelta(days=5), DAY + timedelta(days=6)).count()
        == 0
    )


def test_the_job_counts_as_in_flight_what_the_lifecycle_calls_in_flight():
    """The job runs alone (spark-submit ships one file), so it spells the statuses itself."""
    from scheduling.core import lifecycle
    from scheduling.reports.accuracy import OPEN_STATUSES

    assert set(OPEN_STATUSES) == lifecycle.IN_FLIGHT

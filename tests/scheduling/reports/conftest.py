"""One small local SparkSession for every Spark test of the run (starting one costs seconds)."""

import logging
from datetime import date, datetime, timedelta, timezone

import pytest

from scheduling.reports.accuracy import ALL, FACTS_SCHEMA, spark_session

DAY = date(2026, 11, 20)
NOON = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="session")
def spark():
    session = spark_session(
        "accuracy-tests",
        master="local[2]",
        **{
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "512m",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO on close comes after pytest closed stderr
    yield session
    session.stop()


def fact(n: int = 0, **overrides) -> dict:
    """A delivered, on-time v2 message due at NOON + n seconds; override any fact."""
    due = NOON + timedelta(seconds=n)
    row = {
        "id": f"m{n}",
        "team": "default",
        "endpoint": "billing",
        "version": "v2",
        "delivery_mode": "native",
        "requested_delay_ms": 5_000,
        "due_at": due,
        "published_at": due - timedelta(seconds=5),
        "delivered_at": due + timedelta(milliseconds=4),
        "status": "delivered",
        "lateness_ms": 4,
        "delivery_count": 1,
        "cancelled_at": None,
        "created_at": due - timedelta(seconds=5),  # accepted before due
        "shard": 0,
        "throttled_ms": None,  # no flow control
        "due_date": due.date(),
    }
    row.update(overrides)
    if row["delivered_at"] is None:
        row["lateness_ms"] = overrides.get("lateness_ms")
    return row


@pytest.fixture
def facts(spark):
    """facts(*rows) -> a DataFrame with the exported facts' schema."""

    def make(*rows):
        return spark.createDataFrame([tuple(r[f.name] for f in FACTS_SCHEMA) for r in rows], FACTS_SCHEMA)

    return make


def report_values(**overrides) -> dict:
    """An AccuracyReport row's fields: DAY's overall (platform-wide) row, 10 messages delivered on time."""
    values = {
        "day": DAY, "team": ALL, "endpoint": ALL, "version": ALL, "delivery_mode": ALL, "delay_bucket": ALL,
        "scheduled": 10, "delivered": 10,
        **dict.fromkeys(("cancelled", "failed", "lost", "in_flight", "duplicates", "early", "scheduled_in_past",
                         "throttled", "expired"), 0),
        "lateness_min_ms": 1, "lateness_p50_ms": 4.0, "lateness_p95_ms": 9.0, "lateness_p99_ms": 15.5,
        "lateness_max_ms": 30, "throttled_max_ms": None,
    }  # fmt: skip
    return {**values, **overrides}


def report_create(day=DAY, team="default", endpoint=ALL, version=ALL, delay_bucket=ALL, **counts):
    """One AccuracyReport row (a group when endpoint, version and bucket are all named)."""
    from scheduling.models import AccuracyReport

    mode = ALL if ALL in (endpoint, version, delay_bucket) else "native"
    values = report_values(day=day, team=team, endpoint=endpoint, version=version, delivery_mode=mode,
                           delay_bucket=delay_bucket, **counts)
    return AccuracyReport.objects.create(**values, computed_at=NOON + timedelta(days=1))


OWN_ENDPOINT = {"a": "invoices", "b": "payroll"}  # besides the billing both teams have


def two_teams_reports(day=DAY) -> dict[str, list]:
    """Teams a and b, each with an endpoint billing and one of its own (OWN_ENDPOINT), their rows
    of two days (b's with problems and later p99s), and the platform-wide rows: {team: rows}."""
    from scheduling.models import Team

    rows = {}
    for team, p99, problems in (("a", 10.0, {"lost": 1}), ("b", 90.0, {"duplicates": 2})):
        Team.objects.get_or_create(name=team)
        own = OWN_ENDPOINT[team]
        rows[team] = [
            *(report_create(day - timedelta(days=back), team, lateness_p99_ms=p99 + back) for back in range(2)),
            report_create(day, team, "billing", lateness_p99_ms=p99 + 1),
            report_create(day, team, own, lateness_p99_ms=p99 + 2),
            report_create(day, team, delay_bucket="1-10s", lateness_p99_ms=p99 + 3),
            report_create(day, team, "billing", "v2", "1-10s", lateness_p99_ms=p99 + 1, **problems),
            report_create(day, team, own, "v2", "1-10s", lateness_p99_ms=p99 + 2),
        ]
    rows[ALL] = [
        *(report_create(day - timedelta(days=back), ALL, lateness_p99_ms=50.0 + back) for back in range(2)),
        report_create(day, ALL, version="v2", lateness_p99_ms=50.0),
        report_create(day, ALL, delay_bucket="1-10s", lateness_p99_ms=50.0),
    ]
    return rows

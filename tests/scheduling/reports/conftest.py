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
    """An AccuracyReport row's fields: DAY's overall row, 10 messages delivered on time."""
    values = {
        "day": DAY, "endpoint": ALL, "version": ALL, "delivery_mode": ALL, "delay_bucket": ALL,
        "scheduled": 10, "delivered": 10,
        **dict.fromkeys(("cancelled", "failed", "lost", "in_flight", "duplicates", "early", "scheduled_in_past",
                         "throttled"), 0),
        "lateness_min_ms": 1, "lateness_p50_ms": 4.0, "lateness_p95_ms": 9.0, "lateness_p99_ms": 15.5,
        "lateness_max_ms": 30, "throttled_max_ms": None,
    }  # fmt: skip
    return {**values, **overrides}

"""The accuracy report on a Spark standalone cluster: a master and one worker started from the
installed PySpark (harness/spark_cluster.py), accuracy_report run with SPARK_MASTER=spark://… and
again with local[*] on the same messages, and the two reports compared row for row."""

import random
import shutil
import tempfile
from datetime import datetime, time, timedelta, timezone
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone as django_timezone

from harness.spark_cluster import StandaloneCluster
from scheduling.models import AccuracyReport, DeliveryMode, Endpoint, ScheduledMessage
from scheduling.reports.accuracy import REPORT_COLUMNS

pytestmark = pytest.mark.django_db(transaction=True)
Status = ScheduledMessage.Status
ALL = AccuracyReport.ALL
# requested delays (ms) spanning every delay bucket of the report
DELAYS_MS = (0, 400, 2_500, 30_000, 120_000, 1_800_000, 7_200_000, 172_800_000)


@pytest.fixture(scope="module")
def spark_cluster():
    """One master and one worker (1 core, 1 GiB) for the module; stopped and removed after it."""
    base = Path(tempfile.mkdtemp(prefix="dp-spark-"))
    cluster = StandaloneCluster(base)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def messages(versions, *, days, future_day) -> int:
    """Deterministic facts on three endpoints (v2 and v3, one of them timeout-manager) over past
    days, plus messages due on a future day (in flight): on time, late (past the histogram's
    exact range), early, duplicated, cancelled, failed and lost."""
    rng = random.Random(14)
    endpoints = [
        Endpoint.objects.create(name="billing", queue="billing", topology=versions["v3"]),
        Endpoint.objects.create(name="orders.eu", queue="orders.eu", topology=versions["v3"]),
        Endpoint.objects.create(
            name="legacy", queue="legacy", topology=versions["v2"], delivery_mode=DeliveryMode.TIMEOUT_MANAGER
        ),
    ]
    rows = []
    for day in (*days, future_day):
        midnight = datetime.combine(day, time(), timezone.utc)
        for n in range(240):
            endpoint, delay_ms = endpoints[n % 3], DELAYS_MS[n % len(DELAYS_MS)]
            due = midnight + timedelta(seconds=rng.randrange(60, 86_000), milliseconds=rng.randrange(1000))
            row = {
                "endpoint": endpoint,
                "topology": endpoint.topology,
                "delivery_mode": endpoint.delivery_mode,
                "payload": {"n": n},
                "due_at": due,
                "requested_delay_ms": delay_ms,
                "created_at": due - timedelta(milliseconds=delay_ms),
                "published_at": due - timedelta(milliseconds=delay_ms),
            }
            outcome = "open" if day == future_day else rng.choice(
                ["delivered"] * 6 + ["late", "early", "duplicate", "cancelled", "failed", "open"]
            )
            if outcome in ("delivered", "late", "early", "duplicate"):
                lateness = {"late": rng.randrange(10_000, 90_000), "early": -rng.randrange(1, 50)}.get(
                    outcome, rng.randrange(0, 900)
                )
                row.update(
                    status=Status.DELIVERED,
                    delivered_at=due + timedelta(milliseconds=lateness),
                    lateness_ms=lateness,
                    delivery_count=2 if outcome == "duplicate" else 1,
                )
            elif outcome == "cancelled":
                row.update(status=Status.CANCELLED, cancelled_at=due - timedelta(milliseconds=delay_ms // 2))
            elif outcome == "failed":
                row.update(status=Status.FAILED, delivery_count=1, last_error="handler gave up")
            else:  # still waiting: lost on a past day, in flight on the future one
                row.update(status=rng.choice([Status.PENDING, Status.PUBLISHED]))
            rows.append(ScheduledMessage(**row))
    ScheduledMessage.objects.bulk_create(rows)
    return len(rows)


def report(first_day, last_day) -> list[dict]:
    return list(
        AccuracyReport.objects.filter(day__range=(first_day, last_day))
        .order_by("day", "team", "endpoint", "version", "delivery_mode", "delay_bucket")
        .values(*REPORT_COLUMNS)
    )


def test_the_report_on_a_standalone_cluster_equals_the_local_one(spark_cluster, versions, settings):
    settings.ACCURACY_REPORT_DIR = spark_cluster.base / "accuracy"  # shared by driver and executors
    today = django_timezone.now().date()
    days, future_day = (today - timedelta(days=2), today - timedelta(days=1)), today + timedelta(days=1)
    created = messages(versions, days=days, future_day=future_day)
    first_day, last_day = days[0], future_day
    arguments = ("--since", str(first_day), "--until", str(last_day), "--no-progress")
    assert spark_cluster.state()["completedapps"] == []

    settings.SPARK_MASTER = spark_cluster.master_url
    call_command("accuracy_report", *arguments)
    on_cluster = report(first_day, last_day)

    state = spark_cluster.state()
    assert [(app["name"], app["state"]) for app in state["completedapps"]] == [
        ("delay-accuracy-report", "FINISHED")
    ], "the job ran as an application of the standalone master"
    app_id = state["completedapps"][0]["id"]
    assert any((spark_cluster.base / "work" / app_id).iterdir()), "an executor of the worker ran it"

    settings.SPARK_MASTER = "local[*]"
    call_command("accuracy_report", *arguments)
    local = report(first_day, last_day)
    assert len(spark_cluster.state()["completedapps"]) == 1, "local[*] did not use the cluster"

    assert on_cluster == local
    # equality means something: many groups, rollups and outcomes, every message counted
    assert len(local) > 100
    assert {r["endpoint"] for r in local} == {"billing", "orders.eu", "legacy", ALL}
    assert {r["version"] for r in local} == {"v2", "v3", ALL}
    assert {r["delivery_mode"] for r in local} == {"native", "timeout_manager", ALL}
    assert {r["delay_bucket"] for r in local} == {*AccuracyReport.DELAY_BUCKETS, ALL}
    assert {r["team"] for r in local} == {"default", ALL}
    overall = [r for r in local if (r["team"], r["version"], r["delay_bucket"]) == (ALL, ALL, ALL)]
    assert {r["day"] for r in overall} == {*days, future_day}
    assert sum(r["scheduled"] for r in overall) == created
    for outcome in ("delivered", "cancelled", "failed", "lost", "in_flight", "duplicates", "early"):
        assert sum(r[outcome] for r in overall) > 0, outcome
    assert max(r["lateness_max_ms"] or 0 for r in overall) >= 10_000

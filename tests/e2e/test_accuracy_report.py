"""The accuracy report for real: messages delivered through the cascade by a real worker, then
accuracy_report (export + Spark job in its own process + load), then every number of the
endpoint's rows checked against the messages table."""

import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from harness.waiting import wait_until
from scheduling.models import AccuracyReport, ScheduledMessage

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status
ALL = AccuracyReport.ALL


def bucket(delay_ms: int) -> str:
    bounds = (1_000, 10_000, 60_000, 600_000, 3_600_000, 86_400_000)
    return next(
        (label for label, upper in zip(AccuracyReport.DELAY_BUCKETS, bounds) if delay_ms < upper), ">=1d"
    )


def percentile(values: list[int], fraction: float) -> float | None:
    """Linear interpolation between closest ranks (what Spark's percentile does)."""
    if not values:
        return None
    ordered, position = sorted(values), (len(values) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def due(m: ScheduledMessage):
    """When a message counts as due: the later of due_at and created_at (the lifecycle's rule)."""
    return max(m.due_at, m.created_at)


def expected(messages: list[ScheduledMessage], as_of, lost_after: timedelta) -> dict:
    open_ = [m for m in messages if m.status in (Status.PENDING, Status.PUBLISHED)]
    lateness = [m.lateness_ms for m in messages if m.delivered_at is not None]
    return {
        "scheduled": len(messages),
        "delivered": len(lateness),
        "cancelled": sum(m.status == Status.CANCELLED for m in messages),
        "failed": sum(m.status == Status.FAILED for m in messages),
        "lost": sum(due(m) < as_of - lost_after for m in open_),
        "in_flight": sum(due(m) >= as_of - lost_after for m in open_),
        "duplicates": sum(m.delivery_count > 1 for m in messages),
        "early": sum(x < 0 for x in lateness),
        "scheduled_in_past": sum(m.due_at < m.created_at for m in messages),
        "lateness_min_ms": min(lateness, default=None),
        "lateness_p50_ms": percentile(lateness, 0.5),
        "lateness_p95_ms": percentile(lateness, 0.95),
        "lateness_p99_ms": percentile(lateness, 0.99),
        "lateness_max_ms": max(lateness, default=None),
    }


def actual(row: AccuracyReport) -> dict:
    values = {name: getattr(row, name) for name in expected([], timezone.now(), timedelta())}
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in values.items()}


def test_accuracy_report_matches_the_messages_table(api, platform, worker, endpoint_name, settings, tmp_path):
    """One endpoint on v3 (the default), one on v2: the version column tells them apart. One
    message asks for a time a day ago: it counts as scheduled in the past, on the day it was
    accepted, late only by what the platform added."""
    settings.ACCURACY_REPORT_DIR = tmp_path
    other = f"{endpoint_name}-v2"
    assert api.post("/api/endpoints/", {"name": endpoint_name}, format="json").status_code == 201
    assert api.post("/api/endpoints/", {"name": other, "topology": "v2"}, format="json").status_code == 201
    delays = [0, 0.1, 0.4, 0.75, 1, 1.2, 1.5, 2, 2.5, 3]
    response = api.post(
        "/api/messages/bulk/",
        {
            "messages": [
                {"endpoint": name, "payload": {"n": n}, "delay_seconds": d}
                for n, d in enumerate(delays) for name in (endpoint_name, other)
            ]
        },
        format="json",
    )
    assert response.status_code == 201
    ids = [m["id"] for m in response.json()["messages"]]
    backdated = api.post("/api/messages/", {"endpoint": endpoint_name, "payload": {"n": "past"},
                                            "deliver_at": (timezone.now() - timedelta(days=1)).isoformat()},
                         format="json").json()["id"]
    ids.append(backdated)
    later = api.post(
        "/api/messages/", {"endpoint": endpoint_name, "payload": {}, "delay_seconds": 20}, format="json"
    ).json()["id"]
    assert api.post(f"/api/messages/{later}/cancel/").json()["status"] == "cancelled"
    wait_until(
        lambda: ScheduledMessage.objects.filter(id__in=ids, status=Status.DELIVERED).count() == len(ids),
        timeout=30,
        message="every message delivered by the worker",
    )

    days = sorted({due(m).date() for m in ScheduledMessage.objects.filter(endpoint__name=endpoint_name)})
    call_command("accuracy_report", "--since", str(days[0]), "--until", str(days[-1]), "--no-progress")

    rows = list(AccuracyReport.objects.filter(day__in=days))
    assert rows, "the report has rows"
    as_of = rows[0].computed_at
    lost_after = timedelta(seconds=settings.ACCURACY_LOST_AFTER_SECONDS)
    messages = [m for m in ScheduledMessage.objects.select_related("endpoint__team", "topology")
                if due(m).date() in days]
    mine = [m for m in messages if m.endpoint.name in (endpoint_name, other)]
    assert sum(m.status == Status.DELIVERED for m in mine) == len(ids)
    assert sum(m.status == Status.CANCELLED for m in mine) == 1

    checked = 0
    for row in rows:
        group = [
            m
            for m in messages
            if due(m).date() == row.day
            and row.team in (ALL, m.endpoint.team.name)
            and row.endpoint in (ALL, m.endpoint.name)
            and row.version in (ALL, m.topology.name)
            and row.delivery_mode in (ALL, "native")
            and row.delay_bucket in (ALL, bucket(m.requested_delay_ms))
        ]
        if row.endpoint in (endpoint_name, other, ALL):
            assert actual(row) == pytest.approx(expected(group, as_of, lost_after)), str(row)
            checked += 1
    # this endpoint's groups: its <1s and 1-10s buckets plus the endpoint rollup, and the day's rollups,
    # per team (its team's) and platform-wide (team *, which names no endpoint)
    team = mine[0].endpoint.team.name
    assert {r.team for r in rows if r.endpoint in (endpoint_name, other)} == {team}
    assert {r.team for r in rows} >= {team, ALL}
    assert {r.delay_bucket for r in rows if r.endpoint == endpoint_name} >= {"<1s", "1-10s", ALL}
    assert {r.version for r in rows if r.endpoint == endpoint_name} == {"v3", ALL}
    assert {r.version for r in rows if r.endpoint == other} == {"v2", ALL}
    by_version = {r.version: r.delivered for r in rows if (r.team, r.endpoint, r.delay_bucket) == (ALL, ALL, ALL)}
    assert by_version["v2"] == len(delays) and by_version["v3"] == len(delays) + 1
    past = ScheduledMessage.objects.get(id=backdated)
    assert past.due_at < past.created_at and 0 <= past.lateness_ms < 5_000
    (mine,) = [r for r in rows if (r.endpoint, r.delay_bucket) == (endpoint_name, ALL)]
    assert mine.scheduled_in_past == 1 and mine.lateness_max_ms < 5_000
    overall = [r for r in rows if (r.team, r.endpoint, r.version, r.delay_bucket) == (ALL, ALL, ALL, ALL)]
    assert sum(r.scheduled for r in overall) == len(messages) and checked >= len(overall) + 3
    assert len(rows) == len({(r.day, r.team, r.endpoint, r.version, r.delivery_mode, r.delay_bucket) for r in rows})


REPORT_FIELDS = [f.name for f in AccuracyReport._meta.fields if f.name not in ("id", "computed_at")]


def report_rows(days) -> list[tuple]:
    return sorted(tuple(getattr(r, name) for name in REPORT_FIELDS) for r in AccuracyReport.objects.filter(day__in=days))


def test_a_days_report_is_the_same_after_its_messages_are_pruned(api, platform, worker, endpoint_name, settings,
                                                                 tmp_path):
    """Delivered, cancelled and failed messages go to the archive; the report of their day,
    run again, reads them there: the same figures, row for row. The message still in flight
    stays in the table and is counted from there."""
    settings.ACCURACY_REPORT_DIR = tmp_path
    assert api.post("/api/endpoints/", {"name": endpoint_name}, format="json").status_code == 201
    delays = [0, 0.2, 0.5, 1, 1.5, 2]
    response = api.post("/api/messages/bulk/", {"messages": [
        {"endpoint": endpoint_name, "payload": {"n": n}, "delay_seconds": d} for n, d in enumerate(delays)]},
        format="json")
    delivered = [m["id"] for m in response.json()["messages"]]
    later, waiting = (api.post("/api/messages/", {"endpoint": endpoint_name, "payload": {}, "delay_seconds": d},
                               format="json").json()["id"] for d in (30, 3600))
    assert api.post(f"/api/messages/{later}/cancel/").json()["status"] == "cancelled"
    backdated = api.post("/api/messages/", {"endpoint": endpoint_name, "payload": {"n": "past"},
                                            "deliver_at": (timezone.now() - timedelta(days=1)).isoformat()},
                         format="json").json()["id"]
    delivered.append(backdated)
    wait_until(lambda: ScheduledMessage.objects.filter(id__in=delivered, status=Status.DELIVERED).count()
               == len(delivered), timeout=30, message="every message delivered by the worker")
    failed = ScheduledMessage.objects.get(id=delivered[0])  # as a handler that gave up leaves it
    ScheduledMessage.objects.filter(id=failed.id).update(status=Status.FAILED, attempts=6, last_error="gave up")
    wait_until(lambda: ScheduledMessage.objects.get(id=waiting).status == Status.PUBLISHED, timeout=30)

    mine = ScheduledMessage.objects.filter(endpoint__name=endpoint_name)
    days = sorted({due(m).date() for m in mine})
    call_command("accuracy_report", "--since", str(days[0]), "--until", str(days[-1]), "--no-progress")
    before = report_rows(days)
    assert any(row[REPORT_FIELDS.index("endpoint")] == endpoint_name for row in before)

    settings.DELAY_RETENTION = settings.DELAY_FAILED_RETENTION = timedelta(0)
    call_command("prune_messages", "--no-progress")
    assert set(mine.values_list("id", flat=True)) == {uuid.UUID(waiting)}  # only the one in flight is left
    call_command("accuracy_report", "--since", str(days[0]), "--until", str(days[-1]), "--no-progress")

    assert report_rows(days) == before

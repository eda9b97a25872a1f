"""The admin dashboard's figures: due and accepted windows, lateness by hour, what is in the
past; each figure reads at most a bounded number of index entries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db import connection
from django.db.models import Max, Subquery, Sum
from django.utils import timezone

from scheduling.core import lateness_buckets
from scheduling.core.clock import minute_floor
from scheduling.core.lifecycle import FINISHED, IN_FLIGHT, Status
from scheduling.db.counts import Tally, queryset_tally
from scheduling.endpoints.selectors import endpoint_list_in_teams, message_table_get_statistics
from scheduling.messages.selectors import SCHEDULED_IN_PAST, message_list
from scheduling.models import DeliveryMinute, ScheduledMessage

# --- the dashboard ----------------------------------------------------------------------------

DUE_WINDOWS = (("next minute", timedelta(minutes=1)), ("next hour", timedelta(hours=1)),
               ("next day", timedelta(days=1)))
ACCEPTED_WINDOWS = (("last hour", timedelta(hours=1)), ("last 24 hours", timedelta(days=1)))
DASHBOARD_COUNT_CAP = 10_000  # each figure reads at most this many index entries


@dataclass(frozen=True)
class Lateness:
    count: int
    p50_ms: int | None
    p99_ms: int | None
    max_ms: int | None


def _lateness(rows) -> Lateness:
    """(bucket_ms, deliveries, lateness_max_ms) rows -> count, nearest-rank p50/p99, max."""
    rows = list(rows)
    return Lateness(sum(n for _, n, _ in rows), lateness_buckets.percentile_ms(rows, 0.5),
                    lateness_buckets.percentile_ms(rows, 0.99), max((m for _, n, m in rows if n), default=None))


def lateness_get_since(*, since: datetime, team_ids=None) -> Lateness:
    """Lateness of the deliveries since the minute of ``since`` (DeliveryMinute: a bounded
    number of rows whatever the deliveries per second), of the teams ``team_ids`` (None: all)."""
    minutes = DeliveryMinute.objects.filter(minute__gte=minute_floor(since))
    if team_ids is not None:
        minutes = minutes.filter(team_id__in=team_ids)
    grouped = (minutes.order_by().values("bucket_ms").annotate(n=Sum("deliveries"), largest=Max("lateness_max_ms")))
    return _lateness((row["bucket_ms"], row["n"], row["largest"]) for row in grouped)


def lateness_list_by_hour(*, now: datetime, hours: int = 24, team_ids=None) -> list[tuple[datetime, Lateness]]:
    """One entry per hour of the last ``hours`` (oldest first); hours without deliveries are
    empty, not missing, so a chart's x axis is continuous."""
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - timedelta(hours=hours)
    teams = "" if team_ids is None else " AND team_id = ANY(%s)"
    # raw rows: Django's per-row datetime conversion of the hour cost ~20 µs a row, 150 ms a page
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT floor(extract(epoch FROM minute) / 3600)::bigint, bucket_ms, sum(deliveries)::bigint, "
            f"max(lateness_max_ms) FROM {DeliveryMinute._meta.db_table} WHERE minute >= %s AND minute < %s{teams} "
            f"GROUP BY 1, 2", [start, end, *([sorted(team_ids)] if team_ids is not None else [])])
        grouped = cursor.fetchall()
    per_hour: dict[datetime, list] = {}
    for hour, bucket, n, largest in grouped:
        per_hour.setdefault(datetime.fromtimestamp(hour * 3600, tz=dt_timezone.utc), []).append((bucket, n, largest))
    empty = Lateness(0, None, None, None)
    return [(h, _lateness(per_hour[h]) if h in per_hour else empty)
            for h in (start + timedelta(hours=i) for i in range(hours))]


@dataclass(frozen=True)
class Dashboard:
    now: datetime
    by_status: dict[str, Tally]
    overdue: Tally  # pending or published past their due time
    due: list[tuple[str, Tally]]  # (window label, pending or published messages due in it)
    last_hour: Lateness
    recent_failures: list[ScheduledMessage]
    hourly: list[tuple[datetime, Lateness]]
    in_past: list[tuple[str, Tally]]  # (window label, messages accepted in it that were due before)

    @property
    def last_hour_since(self) -> datetime:
        return minute_floor(self.now - timedelta(hours=1))


def message_count_in_past(*, now: datetime) -> list[tuple[str, Tally]]:
    """Messages accepted in each window that asked for a time already gone (delivered at once;
    their lateness counts from acceptance, so they are counted here instead). Read through the
    partial index of such messages."""
    backdated = ScheduledMessage.objects.filter(SCHEDULED_IN_PAST)
    counts = queryset_tally(querysets={label: backdated.filter(created_at__gte=now - span)
                                       for label, span in ACCEPTED_WINDOWS},
                            cap=DASHBOARD_COUNT_CAP, floors={label for label, _ in ACCEPTED_WINDOWS})
    return [(label, counts[label]) for label, _ in ACCEPTED_WINDOWS]


def message_estimate_by_status() -> dict[str, int | None]:
    """Status -> PostgreSQL's estimate of its messages (None before the table was analysed)."""
    rows, per_column, _ = message_table_get_statistics()
    values, rest = per_column.get("status", ({}, 0.0))
    return {status.value: round(rows * values.get(status.value, rest)) if rows >= 0 else None for status in Status}


def dashboard_get(*, now: datetime | None = None, team_ids=None) -> Dashboard:
    """Every figure costs the same with 50 M finished messages as with none: counts are capped
    (then estimated; finished statuses are estimated first and counted only when few), due
    times are read among the messages in flight (their partial index), lateness from the
    per-minute figures of the delivery path. Five queries. ``team_ids``: the teams whose
    messages it counts (None: every team; the table's statistics then estimate the finished)."""
    now = now or timezone.now()
    messages = ScheduledMessage.objects.all()
    if team_ids is not None:
        messages = messages.filter(endpoint_id__in=Subquery(endpoint_list_in_teams(team_ids=team_ids).values("id")))
    in_flight = messages.filter(status__in=sorted(s.value for s in IN_FLIGHT))  # the index's list
    backdated = messages.filter(SCHEDULED_IN_PAST)
    estimates = message_estimate_by_status() if team_ids is None else {}
    counts = queryset_tally(querysets={
        **{status.value: messages.filter(status=status) for status in Status},
        "overdue": in_flight.filter(due_at__lt=now),
        **{label: in_flight.filter(due_at__gte=now, due_at__lt=now + span) for label, span in DUE_WINDOWS},
        **{f"in past, {label}": backdated.filter(created_at__gte=now - span) for label, span in ACCEPTED_WINDOWS},
    }, cap=DASHBOARD_COUNT_CAP, estimates={status.value: estimates[status.value] for status in FINISHED
                                           if status.value in estimates},
        floors={f"in past, {label}" for label, _ in ACCEPTED_WINDOWS})
    return Dashboard(
        now=now,
        by_status={status.value: counts[status.value] for status in Status},
        overdue=counts["overdue"],
        due=[(label, counts[label]) for label, _ in DUE_WINDOWS],
        last_hour=lateness_get_since(since=now - timedelta(hours=1), team_ids=team_ids),
        recent_failures=list(message_list(status=Status.FAILED, team_ids=team_ids).defer("payload")
                             .order_by("-created_at")[:5]),
        hourly=lateness_list_by_hour(now=now, team_ids=team_ids),
        in_past=[(label, counts[f"in past, {label}"]) for label, _ in ACCEPTED_WINDOWS],
    )

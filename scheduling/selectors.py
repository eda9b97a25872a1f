"""Reads of the database. Views, admin and commands ask here instead of building querysets
themselves. Nothing here talks to the broker (see services/topology.py for its figures)."""

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.db import connection
from django.db.models import Aggregate, Count, F, Max, Min, Q
from django.db.models.functions import Coalesce, TruncHour
from django.utils import timezone

from .conf import conf
from .lifecycle import FINISHED, IN_FLIGHT, Status
from .models import AccuracyReport, ArchiveFile, DeliveryMode, Endpoint, ScheduledMessage, TopologyVersion


def topology_versions():
    return TopologyVersion.objects.all()


def topology_version_get(name: str) -> TopologyVersion | None:
    return TopologyVersion.objects.filter(name=name).first()


def topology_version_default() -> TopologyVersion | None:
    """The version new endpoints get when they name none: DELAY_DEFAULT_VERSION (v3) once it is
    provisioned; until then the newest provisioned version, so that an upgrade never makes
    creating endpoints fail before ``provision_delays`` has run for the new default."""
    configured = topology_version_get(conf().default_version)
    if configured is None or configured.provisioned_at is not None:
        return configured
    return topology_versions_provisioned().order_by("-name").first() or configured


def topology_versions_provisioned():
    return TopologyVersion.objects.filter(provisioned_at__isnull=False)


def endpoints():
    return Endpoint.objects.select_related("topology")


def endpoint_consumption() -> dict[str, bool]:
    """Queue name -> whether platform workers should consume it (active endpoints only).
    Celery queues are left to the workers their owners run for them."""
    return dict(
        Endpoint.objects.exclude(handler=Endpoint.Handler.CELERY_QUEUE).values_list("name", "is_active")
    )


# lifecycle.scheduled_in_past in SQL: asked for a time strictly before the message was accepted
SCHEDULED_IN_PAST = Q(due_at__lt=F("created_at"))


def messages(*, endpoint: str | None = None, status: str | None = None):
    qs = ScheduledMessage.objects.select_related("endpoint", "topology")
    if endpoint:
        qs = qs.filter(endpoint__name=endpoint)
    if status:
        qs = qs.filter(status=status)
    return qs


# --- the admin's control room -----------------------------------------------------------------


def endpoints_with_message_counts():
    """Endpoints with ``n_<status>`` message counts, in one grouped query."""
    counts = {f"n_{status}": Count("messages", filter=Q(messages__status=status)) for status in Status}
    return endpoints().annotate(**counts).order_by("name")  # aggregation drops Meta.ordering


# --- the dashboard ----------------------------------------------------------------------------

DUE_WINDOWS = (("next minute", timedelta(minutes=1)), ("next hour", timedelta(hours=1)),
               ("next day", timedelta(days=1)))
ACCEPTED_WINDOWS = (("last hour", timedelta(hours=1)), ("last 24 hours", timedelta(days=1)))


class PercentileDisc(Aggregate):
    """PostgreSQL's nearest-rank percentile: the first value whose cumulative share is >= p."""

    function = "percentile_disc"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, fraction: float, **extra):
        super().__init__(expression, fraction=repr(float(fraction)), **extra)


@dataclass(frozen=True)
class Lateness:
    count: int
    p50_ms: int | None
    p99_ms: int | None
    max_ms: int | None


def _delivered_since(since: datetime):
    return ScheduledMessage.objects.filter(
        status=Status.DELIVERED, delivered_at__gte=since, lateness_ms__isnull=False
    )


_LATENESS = {
    "count": Count("id"),
    "p50_ms": PercentileDisc("lateness_ms", 0.5),
    "p99_ms": PercentileDisc("lateness_ms", 0.99),
    "max_ms": Max("lateness_ms"),
}


def lateness_since(since: datetime) -> Lateness:
    """Lateness of the deliveries since ``since``, computed in the database."""
    return Lateness(**_delivered_since(since).aggregate(**_LATENESS))


def lateness_by_hour(now: datetime, hours: int = 24) -> list[tuple[datetime, Lateness]]:
    """One entry per hour of the last ``hours`` (oldest first); hours without deliveries are
    empty, not missing, so a chart's x axis is continuous."""
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - timedelta(hours=hours)
    grouped = _delivered_since(start).annotate(hour=TruncHour("delivered_at")).values("hour").annotate(**_LATENESS)
    by_hour = {row.pop("hour"): Lateness(**row) for row in grouped}
    empty = Lateness(0, None, None, None)
    return [(h, by_hour.get(h, empty)) for h in (start + timedelta(hours=i) for i in range(hours))]


@dataclass(frozen=True)
class Dashboard:
    now: datetime
    by_status: dict[str, int]
    overdue: int  # pending or published past their due time
    due: list[tuple[str, int]]  # (window label, pending or published messages due in it)
    last_hour: Lateness
    recent_failures: list[ScheduledMessage]
    hourly: list[tuple[datetime, Lateness]]
    in_past: list[tuple[str, int]]  # (window label, messages accepted in it that were due before)


def scheduled_in_past_counts(now: datetime) -> list[tuple[str, int]]:
    """Messages accepted in each window that asked for a time already gone (delivered at once;
    their lateness counts from acceptance, so they are counted here instead)."""
    windows = {f"w{i}": Count("id", filter=Q(created_at__gte=now - span))
               for i, (_, span) in enumerate(ACCEPTED_WINDOWS)}
    longest = max(span for _, span in ACCEPTED_WINDOWS)
    counts = ScheduledMessage.objects.filter(SCHEDULED_IN_PAST, created_at__gte=now - longest).aggregate(**windows)
    return [(label, counts[f"w{i}"]) for i, (label, _) in enumerate(ACCEPTED_WINDOWS)]


def dashboard(now: datetime | None = None) -> Dashboard:
    now = now or timezone.now()
    grouped = dict(ScheduledMessage.objects.order_by().values_list("status").annotate(n=Count("id")))
    windows = {f"w{i}": Count("id", filter=Q(due_at__gte=now, due_at__lt=now + span))
               for i, (_, span) in enumerate(DUE_WINDOWS)}
    due = ScheduledMessage.objects.filter(status__in=IN_FLIGHT).aggregate(
        overdue=Count("id", filter=Q(due_at__lt=now)), **windows
    )
    failures = list(
        messages(status=Status.FAILED).defer("payload").order_by("-created_at")[:5]
    )
    return Dashboard(
        now=now,
        by_status={status.value: grouped.get(status, 0) for status in Status},
        overdue=due.pop("overdue"),
        due=[(label, due[f"w{i}"]) for i, (label, _) in enumerate(DUE_WINDOWS)],
        last_hour=lateness_since(now - timedelta(hours=1)),
        recent_failures=failures,
        hourly=lateness_by_hour(now),
        in_past=scheduled_in_past_counts(now),
    )


# --- the accuracy report's facts -------------------------------------------------------------


def messages_due_between(*, since: datetime, until: datetime):
    """The messages the accuracy report counts on the days of [since, until): due in it, where due
    is the later of due_at and created_at (the lifecycle's rule), so a message scheduled in the
    past counts on the day it was accepted, not on a day whose report ran long ago. Filters on
    the message's own columns only (archive/parquet.py reads them through COPY)."""
    due_in_range = Q(due_at__gte=since, due_at__lt=until, created_at__lt=until)
    # status IN (every status) lets PostgreSQL range-scan the (status, created_at) index for the
    # few backdated rows instead of reading the whole table (there is no index on created_at alone)
    accepted_in_range = Q(due_at__lt=since, status__in=list(Status), created_at__gte=since, created_at__lt=until)
    return ScheduledMessage.objects.filter(due_in_range | accepted_in_range).order_by()


# --- retention (services/retention.py) ---------------------------------------------------------

# When a finished message finished: finished_at, or for rows from before it was recorded the
# latest moment the row has (a failed one: its delivery, or its publishing if it was unroutable).
FINISHED_AT = Coalesce("finished_at", "cancelled_at", "delivered_at", "published_at", "created_at")


def messages_past_retention(*, status: Status, cutoff: datetime):
    """Finished messages of one status that finished before ``cutoff``. A message finishes after
    it was accepted, so ``created_at < cutoff`` bounds the (status, created_at) index's range."""
    assert status in FINISHED, status
    return (ScheduledMessage.objects.filter(status=status, created_at__lt=cutoff)
            .alias(done_at=FINISHED_AT).filter(done_at__lt=cutoff).order_by())


def messages_in_flight_created_before(cutoff: datetime) -> int:
    """Pending or published messages accepted before ``cutoff``: old, but never pruned."""
    return ScheduledMessage.objects.filter(status__in=IN_FLIGHT, created_at__lt=cutoff).order_by().count()


def message_table_bytes_per_row() -> float | None:
    """The messages table with its indexes (and TOAST) over its rows, by PostgreSQL's own
    figures: what a deleted row gives back for new ones. None while the table is empty."""
    table = ScheduledMessage._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s::regclass), reltuples FROM pg_class WHERE oid = %s::regclass",
                       [table, table])
        size, rows = cursor.fetchone()
        if rows <= 0:  # never analysed
            cursor.execute(f"SELECT count(*) FROM {table}")
            rows = cursor.fetchone()[0]
    return size / rows if rows > 0 else None


def archive_files(*, first_day: date, last_day: date) -> list[ArchiveFile]:
    """The archive's files of messages due on these days (its list: what a prune committed)."""
    return list(ArchiveFile.objects.filter(day__range=(first_day, last_day)).order_by("day", "path"))


# --- the accuracy report --------------------------------------------------------------------------

REPORT_DIMENSIONS = ("endpoint", "version", "delivery_mode", "delay_bucket")
ALL = AccuracyReport.ALL


def accuracy_report_latest_day() -> date | None:
    return AccuracyReport.objects.order_by("-day").values_list("day", flat=True).first()


def accuracy_slice(*, first_day: date, last_day: date, **dimensions: str) -> list[AccuracyReport]:
    """One row per day for one slice: each dimension a value, or ALL (the default). Only the
    slices the job computes have rows: all four dimensions, exactly one, or none."""
    selected = {name: dimensions.get(name, ALL) for name in REPORT_DIMENSIONS}
    return list(AccuracyReport.objects.filter(day__range=(first_day, last_day), **selected).order_by("day"))


def accuracy_breakdown(*, day: date, by: str) -> list[AccuracyReport]:
    """The day's rollup rows by one dimension (per endpoint, per version, per delay bucket)."""
    others = {name: ALL for name in REPORT_DIMENSIONS if name != by}
    return list(AccuracyReport.objects.filter(day=day, **others).exclude(**{by: ALL}).order_by(by))


def accuracy_problem_groups(*, first_day: date, last_day: date) -> list[AccuracyReport]:
    """Groups (not rollups) with lost, duplicated or early messages, worst first."""
    groups = AccuracyReport.objects.filter(day__range=(first_day, last_day)).exclude(
        Q(endpoint=ALL) | Q(version=ALL) | Q(delivery_mode=ALL) | Q(delay_bucket=ALL))
    return list(groups.filter(Q(lost__gt=0) | Q(duplicates__gt=0) | Q(early__gt=0))
                .order_by((F("lost") + F("duplicates") + F("early")).desc(), "-day"))


def accuracy_report_values(dimension: str) -> list[str]:
    """The values one dimension takes in the report (for filters); ALL excluded."""
    values = AccuracyReport.objects.exclude(**{dimension: ALL}).order_by(dimension)
    return list(values.values_list(dimension, flat=True).distinct())


# --- metrics (scheduling/metrics.py, metrics_figures.py) ---------------------------------------


def endpoint_names(ids) -> dict[int, str]:
    return dict(Endpoint.objects.filter(id__in=ids).values_list("id", "name"))


def topology_version_names(ids) -> dict[int, str]:
    return dict(TopologyVersion.objects.filter(id__in=ids).values_list("id", "name"))


@dataclass(frozen=True)
class Outbox:
    pending: dict[str, int]  # version -> native rows waiting for the relay
    oldest_created_at: datetime | None  # of those, the oldest


def outbox() -> Outbox:
    """The relay's backlog: native rows still pending (timeout-manager rows wait in the table by
    design until shortly before due; an overdue one is counted by ``overdue_by_version``)."""
    grouped = (ScheduledMessage.objects.filter(status=Status.PENDING, delivery_mode=DeliveryMode.NATIVE)
               .order_by().values("topology__name").annotate(n=Count("id"), oldest=Min("created_at")))
    rows = list(grouped)
    return Outbox({row["topology__name"]: row["n"] for row in rows},
                  min((row["oldest"] for row in rows), default=None))


def overdue_by_version(now: datetime, grace: timedelta) -> dict[str, int]:
    """Version -> messages still pending or published ``grace`` after their due time: what the
    accuracy report counts as lost (ACCURACY_LOST_AFTER_SECONDS)."""
    grouped = (ScheduledMessage.objects.filter(status__in=IN_FLIGHT, due_at__lt=now - grace)
               .order_by().values("topology__name").annotate(n=Count("id")))
    return {row["topology__name"]: row["n"] for row in grouped}

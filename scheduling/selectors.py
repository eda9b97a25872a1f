"""Reads. Views, admin and commands ask here instead of building querysets themselves."""

import math
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Aggregate, Count, F, Max, Q
from django.db.models.functions import TruncHour
from django.utils import timezone

from topology import cascade, explain

from . import broker, wire
from .models import AccuracyReport, Endpoint, ScheduledMessage, TopologyVersion


def topology_versions():
    return TopologyVersion.objects.all()


def topology_version_get(name: str) -> TopologyVersion | None:
    return TopologyVersion.objects.filter(name=name).first()


def topology_version_default() -> TopologyVersion | None:
    return (
        TopologyVersion.objects.filter(is_default=True).first()
        or topology_version_get(settings.DELAY_DEFAULT_VERSION)
    )


def topology_versions_provisioned():
    return TopologyVersion.objects.filter(provisioned_at__isnull=False)


def endpoint_get(name: str) -> Endpoint | None:
    return Endpoint.objects.select_related("topology").filter(name=name).first()


def endpoints():
    return Endpoint.objects.select_related("topology")


def endpoint_consumption() -> dict[str, bool]:
    """Queue name -> whether platform workers should consume it (active endpoints only).
    Celery queues are left to the workers their owners run for them."""
    return dict(
        Endpoint.objects.exclude(handler=Endpoint.Handler.CELERY_QUEUE).values_list("name", "is_active")
    )


def messages(*, endpoint: str | None = None, status: str | None = None):
    qs = ScheduledMessage.objects.select_related("endpoint", "topology")
    if endpoint:
        qs = qs.filter(endpoint__name=endpoint)
    if status:
        qs = qs.filter(status=status)
    return qs


def message_get(message_id) -> ScheduledMessage | None:
    return ScheduledMessage.objects.select_related("endpoint", "topology").filter(id=message_id).first()


# --- the admin's control room -----------------------------------------------------------------


def endpoints_with_message_counts():
    """Endpoints with ``n_<status>`` message counts, in one grouped query."""
    counts = {
        f"n_{status}": Count("messages", filter=Q(messages__status=status))
        for status in ScheduledMessage.Status.values
    }
    return endpoints().annotate(**counts).order_by("name")  # aggregation drops Meta.ordering


@dataclass(frozen=True)
class MessageWire:
    """How a message travels: what it was (or would now be) published with, and its path."""

    published: bool  # False: a preview of a publish made now
    exchange: str
    routing_key: str
    cascade_seconds: int
    headers: dict
    path_rows: list[tuple[str, ...]]


def message_wire(message: ScheduledMessage, now: datetime | None = None) -> MessageWire:
    """Rebuild the publish from the row (``wire.outgoing`` at ``published_at`` gives the same
    headers and key the relay used). The ``origin`` header names the publishing process, which
    a rebuild cannot know, so it is left out."""
    version = message.topology.cascade
    published = message.published_at is not None and bool(message.routing_key)
    outgoing, route = wire.outgoing(message, version, message.published_at if published else now or timezone.now())
    headers = {k: v for k, v in outgoing.headers.items() if k != "origin"}
    rows = explain.explain_rows(version, route.delay_seconds, message.endpoint.name)
    return MessageWire(published, route.exchange, route.routing_key, route.delay_seconds, headers, rows)


# --- the dashboard ----------------------------------------------------------------------------

IN_FLIGHT = (ScheduledMessage.Status.PENDING, ScheduledMessage.Status.PUBLISHED)
DUE_WINDOWS = (("next minute", timedelta(minutes=1)), ("next hour", timedelta(hours=1)),
               ("next day", timedelta(days=1)))


class PercentileDisc(Aggregate):
    """PostgreSQL's nearest-rank percentile: the first value whose cumulative share is >= p."""

    function = "percentile_disc"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, fraction: float, **extra):
        super().__init__(expression, fraction=repr(float(fraction)), **extra)


def nearest_rank(sorted_values: list[int], fraction: float) -> int | None:
    """The value at rank ceil(p * n) (1-based), as percentile_disc computes it."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(fraction * len(sorted_values)) - 1)]


@dataclass(frozen=True)
class Lateness:
    count: int
    p50_ms: int | None
    p99_ms: int | None
    max_ms: int | None


def _lateness_in_python(values: list[int]) -> Lateness:
    values = sorted(values)
    return Lateness(len(values), nearest_rank(values, 0.5), nearest_rank(values, 0.99), values[-1] if values else None)


def _delivered_since(since: datetime):
    return ScheduledMessage.objects.filter(
        status=ScheduledMessage.Status.DELIVERED, delivered_at__gte=since, lateness_ms__isnull=False
    )


_LATENESS = {
    "count": Count("id"),
    "p50_ms": PercentileDisc("lateness_ms", 0.5),
    "p99_ms": PercentileDisc("lateness_ms", 0.99),
    "max_ms": Max("lateness_ms"),
}


def lateness_since(since: datetime) -> Lateness:
    """Lateness of the deliveries since ``since``; computed in the database on PostgreSQL."""
    qs = _delivered_since(since)
    if connection.vendor == "postgresql":
        return Lateness(**qs.aggregate(**_LATENESS))
    return _lateness_in_python(list(qs.values_list("lateness_ms", flat=True)))


def lateness_by_hour(now: datetime, hours: int = 24) -> list[tuple[datetime, Lateness]]:
    """One entry per hour of the last ``hours`` (oldest first); hours without deliveries are
    empty, not missing, so a chart's x axis is continuous."""
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - timedelta(hours=hours)
    qs = _delivered_since(start)
    if connection.vendor == "postgresql":
        grouped = qs.annotate(hour=TruncHour("delivered_at")).values("hour").annotate(**_LATENESS)
        by_hour = {row.pop("hour"): Lateness(**row) for row in grouped}
    else:
        values: dict[datetime, list[int]] = {}
        for delivered_at, lateness_ms in qs.values_list("delivered_at", "lateness_ms"):
            values.setdefault(delivered_at.replace(minute=0, second=0, microsecond=0), []).append(lateness_ms)
        by_hour = {hour: _lateness_in_python(v) for hour, v in values.items()}
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


def dashboard(now: datetime | None = None) -> Dashboard:
    now = now or timezone.now()
    grouped = dict(ScheduledMessage.objects.order_by().values_list("status").annotate(n=Count("id")))
    windows = {f"w{i}": Count("id", filter=Q(due_at__gte=now, due_at__lt=now + span))
               for i, (_, span) in enumerate(DUE_WINDOWS)}
    due = ScheduledMessage.objects.filter(status__in=IN_FLIGHT).aggregate(
        overdue=Count("id", filter=Q(due_at__lt=now)), **windows
    )
    failures = list(
        messages(status=ScheduledMessage.Status.FAILED).defer("payload").order_by("-created_at")[:5]
    )
    return Dashboard(
        now=now,
        by_status={status: grouped.get(status, 0) for status in ScheduledMessage.Status.values},
        overdue=due.pop("overdue"),
        due=[(label, due[f"w{i}"]) for i, (label, _) in enumerate(DUE_WINDOWS)],
        last_hour=lateness_since(now - timedelta(hours=1)),
        recent_failures=failures,
        hourly=lateness_by_hour(now),
    )


# --- a cascade's state on the broker ----------------------------------------------------------


@dataclass(frozen=True)
class LevelDepth:
    level: int
    queue: str
    ttl_ms: int
    messages: int | None  # None: the queue is missing, or the broker has no statistics yet
    ready: int | None
    unacked: int | None


@dataclass(frozen=True)
class EndpointBinding:
    endpoint: str
    binding_key: str
    is_active: bool
    on_broker: bool


@dataclass(frozen=True)
class InFlight:
    vhost: str
    levels: list[LevelDepth]  # highest level first, like the cascade
    unroutable_queue: str
    unroutable: int | None
    delivery_exchange: str
    bindings: list[EndpointBinding]
    unknown_bindings: list[str]  # keys on the delivery exchange that no endpoint explains

    @property
    def in_cascade(self) -> int:
        return sum(level.messages or 0 for level in self.levels)


def topology_in_flight(version: TopologyVersion) -> InFlight:
    """Queue depths of a version's levels and unroutable queue, and the delivery exchange's
    endpoint bindings, read from the management API (ManagementUnavailable when it is away).
    The broker refreshes these statistics every few seconds, so they lag a little."""
    plan_version, management, vhost = version.cascade, broker.management(), broker.vhost()
    depths = management.queue_depths(vhost)
    delivery = cascade.delivery_exchange(version.prefix)
    bound = {b["routing_key"] for b in management.bindings_from(vhost, delivery) if b["destination_type"] == "queue"}

    def level(number: int) -> LevelDepth:
        name = cascade.level_name(version.prefix, number)
        queue = depths.get(name, {})
        return LevelDepth(number, name, cascade.level_ttl_ms(plan_version, number), queue.get("messages"),
                          queue.get("messages_ready"), queue.get("messages_unacknowledged"))

    unroutable = cascade.unroutable_name(version.prefix)
    bindings = [
        EndpointBinding(name, key, active, key in bound)
        for name, active in Endpoint.objects.order_by("name").values_list("name", "is_active")
        for key in [cascade.endpoint_binding_key(name)]
    ]
    return InFlight(
        vhost=vhost,
        levels=[level(n) for n in range(version.levels - 1, -1, -1)],
        unroutable_queue=unroutable,
        unroutable=depths.get(unroutable, {}).get("messages"),
        delivery_exchange=delivery,
        bindings=bindings,
        unknown_bindings=sorted(bound - {b.binding_key for b in bindings}),
    )


def versions_in_flight() -> dict[str, int | None]:
    """Version name -> messages in its level queues (one management call; None if unknown)."""
    depths = broker.management().queue_depths(broker.vhost())
    totals = {}
    for version in TopologyVersion.objects.all():
        counts = [depths.get(cascade.level_name(version.prefix, level), {}).get("messages") for level in range(version.levels)]
        known = [c for c in counts if c is not None]
        totals[version.name] = sum(known) if known else None
    return totals


# --- the accuracy report's facts -------------------------------------------------------------


def delivery_facts(*, since: datetime, until: datetime):
    """The accuracy report's facts for messages due in [since, until), as dicts. ``endpoint_name``
    because a values() key may not shadow the ``endpoint`` foreign key."""
    return (
        ScheduledMessage.objects.filter(due_at__gte=since, due_at__lt=until)
        .order_by()
        .values(
            "id", "requested_delay_ms", "due_at", "published_at", "delivered_at", "status", "lateness_ms",
            "delivery_count", "cancelled_at", "delivery_mode",  # as recorded when scheduled
            endpoint_name=F("endpoint__name"), version=F("topology__name"),
        )
    )


# --- the accuracy report --------------------------------------------------------------------------

REPORT_DIMENSIONS = ("endpoint", "version", "delivery_mode", "delay_bucket")
ALL = AccuracyReport.ALL


def accuracy_reports():
    return AccuracyReport.objects.all()


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

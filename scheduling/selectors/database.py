"""Reads of the database. Views, admin and commands ask here instead of building querysets
themselves. Nothing here talks to the broker (its figures are selectors/broker.py); the accuracy
report's reads are reports/facts.py."""

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from itertools import product

from django.db import OperationalError, connection, transaction
from django.db.models import Count, F, Max, Min, Q, Subquery, Sum
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..clock import minute_floor
from ..conf import conf
from ..delivery.flow import Limit
from ..lifecycle import FINISHED, IN_FLIGHT, Status
from ..delivery.models import MessageAttempt
from ..models import DeliveryMinute, DeliveryMode, Endpoint, Schedule, ScheduledMessage, TopologyVersion
from ..observability import lateness_buckets
from .cursors import Position


def topology_version_list():
    return TopologyVersion.objects.all()


def topology_version_get(*, name: str) -> TopologyVersion | None:
    return TopologyVersion.objects.filter(name=name).first()


def topology_version_get_default() -> TopologyVersion | None:
    """The version new endpoints get when they name none: DELAY_DEFAULT_VERSION (v3) once it is
    provisioned; until then the newest provisioned version, so that an upgrade never makes
    creating endpoints fail before ``provision_delays`` has run for the new default."""
    configured = topology_version_get(name=conf().default_version)
    if configured is None or configured.provisioned_at is not None:
        return configured
    return topology_version_list_provisioned().order_by("-name").first() or configured


def topology_version_list_provisioned():
    return TopologyVersion.objects.filter(provisioned_at__isnull=False)


def endpoint_list():
    return Endpoint.objects.select_related("topology")


def message_list_attempts(*, message_id):
    """A message's attempts in the order they were made (started_at, then id: newest last), read
    by its index (message, started_at)."""
    return MessageAttempt.objects.filter(message_id=message_id).order_by("started_at", "id")


def endpoint_get_consumption() -> dict[str, bool]:
    """Queue name -> whether platform workers should consume it (active endpoints only).
    Celery queues are left to the workers their owners run for them."""
    return dict(
        Endpoint.objects.exclude(handler=Endpoint.Handler.CELERY_QUEUE).values_list("queue", "is_active")
    )


def endpoint_get_flow_limits() -> dict[str, Limit]:
    """Queue name -> the flow control of each endpoint that has any (the delivery loop's gate)."""
    limited = Endpoint.objects.filter(Q(max_deliveries_per_second__isnull=False) | Q(max_concurrent__isnull=False))
    return {name: Limit(endpoint_id, per_second, concurrent) for name, endpoint_id, per_second, concurrent
            in limited.values_list("queue", "id", "max_deliveries_per_second", "max_concurrent")}


def schedule_list():
    return Schedule.objects.select_related("endpoint").order_by("key")


def _endpoints_of(team_ids) -> object:
    return Endpoint.objects.all() if team_ids is None else Endpoint.objects.filter(team_id__in=team_ids)


def message_list_matching(*, endpoint: str | None = None, status: str | None = None, schedule: str | None = None,
                          due_before: datetime | None = None, due_after: datetime | None = None,
                          created_before: datetime | None = None, created_after: datetime | None = None,
                          team_ids=None):
    """The messages a bulk action names by filters (bounds exclusive), of the teams ``team_ids``
    (None: every team); ids only are read from it."""
    qs = ScheduledMessage.objects.all()
    if team_ids is not None:
        qs = qs.filter(endpoint_id__in=Subquery(_endpoints_of(team_ids).values("id")))
    if endpoint:
        qs = qs.filter(endpoint_id__in=Subquery(_endpoints_of(team_ids).filter(name=endpoint).values("id")))
    for field, value in (("status", status), ("schedule", schedule), ("due_at__lt", due_before),
                         ("due_at__gt", due_after), ("created_at__lt", created_before),
                         ("created_at__gt", created_after)):
        if value is not None and value != "":
            qs = qs.filter(**{field: value})
    return qs


# lifecycle.scheduled_in_past in SQL: asked for a time strictly before the message was accepted
SCHEDULED_IN_PAST = Q(due_at__lt=F("created_at"))


def message_list(*, endpoint_id: int | None = None, status: str | None = None, schedule: str | None = None,
                 team_ids=None):
    """Messages with their endpoint (and its team) and version, by endpoint, status and schedule
    key, of the teams ``team_ids`` (None: every team). The endpoints are named by id (the edge
    resolved the name within the caller's teams), so the message index's ranges serve the list:
    joining on the name would leave the order to a sort of the endpoint's history."""
    qs = ScheduledMessage.objects.select_related("endpoint__team", "topology")
    if team_ids is not None:
        qs = qs.filter(endpoint_id__in=Subquery(_endpoints_of(team_ids).values("id")))
    if schedule:
        qs = qs.filter(schedule=schedule)
    if endpoint_id is not None:
        qs = qs.filter(endpoint_id=endpoint_id)
    if status:
        qs = qs.filter(status=status)
    return qs


def endpoint_get_named(*, name: str, team_ids=None, team: str | None = None) -> list[Endpoint]:
    """The endpoints called ``name`` in the teams ``team_ids`` (None: any), in the team named
    ``team`` if given: one, none, or (a name several teams use) more."""
    rows = _endpoints_of(team_ids).select_related("team", "topology").filter(name=name)
    if team:
        rows = rows.filter(team__name=team)
    return list(rows.order_by("team__name")[:20])


# --- lists that stay flat as history grows -----------------------------------------------------
#
# A page of messages is read newest first (or by due time) through an index, never by sorting or
# counting the table: with 50 M finished rows a sort of one endpoint's history took seconds and an
# exact count of it hundreds of milliseconds (docs/performance.md, "History"). When the filters
# fix fewer columns than the index leads with, the page is the merge of one index range per value
# of the others (5 statuses; or endpoint x status x version), each read only as far as one page.


@dataclass(frozen=True)
class MessagePage:
    rows: list[ScheduledMessage]
    more: bool  # rows exist past these, in the direction read


TEAM_GROUPS_MAX = 600  # index ranges a team's list merges per page before it reads by status instead


def message_list_groups(*, fixed: frozenset[str] | set[str], team_ids=None) -> list[dict]:
    """The index ranges a list merges, given which of endpoint, status, topology and schedule its
    filters fix to one value: each range is one value of each column the filters leave free.
    Through (schedule, status, created_at) for a schedule's runs; else through (status,
    created_at) while neither endpoint nor version is fixed, else through (endpoint, status,
    topology, created_at). [] when the filters fix every leading column (no merge). A list
    narrowed to some teams (``team_ids``) reads its endpoints' ranges while they are few (a small
    team's newest messages are not found by reading everybody's)."""
    values = {"status": [s.value for s in Status]}
    if "schedule" in fixed:  # (schedule, status, created_at, id): a range per status
        return [] if "status" in fixed else [{"status": status} for status in values["status"]]
    team_endpoints = None
    if team_ids is not None and not fixed & {"endpoint", "topology"}:
        team_endpoints = list(_endpoints_of(team_ids).order_by("id").values_list("id", flat=True)[:TEAM_GROUPS_MAX])
        versions = TopologyVersion.objects.count()
        statuses = 1 if "status" in fixed else len(values["status"])
        if not team_endpoints or len(team_endpoints) * versions * statuses > TEAM_GROUPS_MAX:
            team_endpoints = None
    if fixed & {"endpoint", "topology"} or team_endpoints:
        values["endpoint_id"] = team_endpoints or list(Endpoint.objects.order_by("id").values_list("id", flat=True))
        values["topology_id"] = list(TopologyVersion.objects.order_by("id").values_list("id", flat=True))
    free = [(key, options) for key, options in values.items() if key.removesuffix("_id") not in fixed]
    if not free:
        return []
    keys = [key for key, _ in free]
    return [dict(zip(keys, combination)) for combination in product(*(options for _, options in free))]


_GROUP_TYPES = {"status": "text", "endpoint_id": "bigint", "topology_id": "bigint"}
_FINISHED = frozenset(s.value for s in FINISHED)  # the statuses of message_endpoint_history
_IN_FLIGHT = frozenset(s.value for s in IN_FLIGHT)  # of message_endpoint_in_flight


def _past(field: str, position: Position, descending: bool) -> Q:
    """Rows after ``position`` in (field, id) order. The first half bounds the index range; the
    second decides the rows tied with the position's value by their id."""
    beyond, reach = ("lt", "lte") if descending else ("gt", "gte")
    return Q(**{f"{field}__{reach}": position.at}) & (
        Q(**{f"{field}__{beyond}": position.at}) | Q(**{f"id__{beyond}": position.id}))


def message_get_page(*, queryset, groups: list[dict], order_by: str = "created_at", descending: bool = True,
                     after: Position | None = None, before: Position | None = None, limit: int = 50) -> MessagePage:
    """One page of ``queryset`` in (order_by, id) order, descending or not: the first, the one
    after ``after`` or the one before ``before`` (rows returned in the list's order). ``groups``
    (message_list_groups) are merged: each is read through its own index range, LIMIT page + 1."""
    assert not (after and before)
    backwards = before is not None
    down = descending != backwards
    base = queryset.order_by()
    if after or before:
        base = base.filter(_past(order_by, after or before, down))
    ordering = (f"-{order_by}", "-id") if down else (order_by, "id")
    if len(groups) <= 1:
        rows = list(base.filter(**(groups[0] if groups else {})).order_by(*ordering)[:limit + 1])
    else:
        rows = _merged(base, groups, order_by, down, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return MessagePage(rows[::-1] if backwards else rows, more)


def _merged(base, groups: list[dict], order_by: str, down: bool, limit: int) -> list:
    """The first ``limit`` rows of the groups' ranges merged. Groups of finished and of in-flight
    statuses are read apart, each with its statuses written out, so that PostgreSQL may use the
    partial indexes of each (a status that is only a LATERAL parameter proves neither predicate)."""
    classes = [[g for g in groups if g.get("status") in statuses] for statuses in (_FINISHED, _IN_FLIGHT)]
    if "status" not in groups[0]:
        classes = [groups]
    found = []
    for class_groups in filter(None, classes):
        statuses = sorted({g["status"] for g in class_groups}) if "status" in class_groups[0] else None
        found += _merged_ids(base.filter(status__in=statuses) if statuses else base, class_groups, order_by, down, limit)
    found.sort(key=lambda pair: (pair[1], pair[0]), reverse=down)
    ids = [message_id for message_id, _ in found[:limit]]
    rows = base.in_bulk(ids)
    return [rows[i] for i in ids if i in rows]


def _merged_ids(base, groups: list[dict], order_by: str, down: bool, limit: int) -> list[tuple]:
    """(id, ordering value) of the first ``limit`` rows of the groups' ranges: one statement, the
    groups as arrays (unnest), each range read by a LATERAL subquery with its own ORDER BY and
    LIMIT (through message_endpoint_history / _in_flight, or message_status_created)."""
    keys = list(groups[0])
    ordering = (f"-{order_by}", "-id") if down else (order_by, "id")
    inner = (base.filter(**{key: RawSQL(f"g.{key}", ()) for key in keys}).order_by(*ordering)
             .values_list("id", order_by)[:limit])
    inner_sql, inner_params = inner.query.sql_with_params()
    arrays = ", ".join(f"%s::{_GROUP_TYPES[key]}[]" for key in keys)
    direction = "DESC" if down else "ASC"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT x.id, x.position FROM unnest({arrays}) AS g({', '.join(keys)}) "
            f"CROSS JOIN LATERAL ({inner_sql}) AS x(id, position) "
            f"ORDER BY x.position {direction}, x.id {direction} LIMIT %s",
            [*([group[key] for group in groups] for key in keys), *inner_params, limit])
        return cursor.fetchall()


def message_get_due_years() -> tuple[int | None, int | None]:
    """The years of the earliest and latest due times (PostgreSQL reads min and max at the two
    ends of the due_at index): the calendar of the messages list, without a DISTINCT over it."""
    span = ScheduledMessage.objects.aggregate(first=Min("due_at"), last=Max("due_at"))
    return tuple(timezone.localtime(v).year if v else None for v in (span["first"], span["last"]))


def message_search(*, queryset, term: str):
    """Exact id or idempotency key; a term that is not a UUID only matches keys. The key's
    index leads with the endpoint: asking it once per endpoint (a few descents) is what makes
    a key without an endpoint a lookup, not a scan of the index."""
    try:
        by_id = Q(id=uuid.UUID(term))
    except ValueError:
        by_id = Q(pk__in=[])
    endpoint_ids = list(Endpoint.objects.values_list("id", flat=True))
    return queryset.filter(by_id | Q(endpoint_id__in=endpoint_ids, idempotency_key=term))


# --- counts that stay bounded: exact up to a cap, PostgreSQL's estimate above it ----------------


class Tally(int):
    """A count: exact, PostgreSQL's estimate (``exact`` False), or a floor (``floor``: more than
    value - 1, where no estimate is worth showing); shows as "1,234", "≈ 1,234" or "> 10,000"."""

    exact: bool
    floor: bool

    def __new__(cls, value: int, exact: bool = True, floor: bool = False):
        tally = super().__new__(cls, value)
        tally.exact, tally.floor = exact and not floor, floor
        return tally

    def __str__(self) -> str:
        if self.floor:
            return f"> {int(self) - 1:,}"
        return f"{int(self):,}" if self.exact else f"≈ {int(self):,}"

    def __repr__(self) -> str:
        return f"Tally({int(self)}, exact={self.exact}, floor={self.floor})"


def message_estimate_in_past() -> int | None:
    """Messages scheduled in the past, as their partial index counted them at its last VACUUM
    or ANALYZE: the planner's own guess for due_at < created_at is a third of the table."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass('message_in_past_created')")
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None and row[0] >= 0 else None


def queryset_estimate(*, queryset) -> int:
    """How many rows the planner expects ``queryset`` to have (EXPLAIN, nothing is read):
    PostgreSQL's statistics, scaled to the table's current size."""
    sql, params = queryset.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return int(plan[0]["Plan"]["Plan Rows"])


def queryset_tally(*, querysets: dict, cap: int, estimates: dict | None = None, floors=()) -> dict:
    """Key -> Tally of each queryset: its rows counted no further than cap + 1 (all in one
    statement), exact when at most ``cap``; above, PostgreSQL's estimate (never below cap + 1).
    ``estimates``: known estimates by key (statistics); a key whose estimate is above ``cap`` is
    not counted at all (finished statuses: their counts only grow with history). ``floors``:
    keys shown as "more than cap" instead (the planner has no statistics for due_at < created_at
    and guesses a third of the table)."""
    estimates = estimates or {}
    counted = {key: qs for key, qs in querysets.items() if (estimates.get(key) or 0) <= cap}
    found = {}
    if counted:
        parts, params = [], []
        for qs in counted.values():
            sql, part_params = qs.order_by().values("pk")[:cap + 1].query.sql_with_params()
            parts.append(f"(SELECT count(*) FROM ({sql}) AS capped)")
            params += part_params
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {', '.join(parts)}", params)
            found = dict(zip(counted, cursor.fetchone()))
    result = {}
    for key, qs in querysets.items():
        n = found.get(key)
        if n is not None and n <= cap:
            result[key] = Tally(n)
        elif key in floors:
            result[key] = Tally(cap + 1, floor=True)
        else:
            estimate = estimates.get(key)
            result[key] = Tally(max(cap + 1, estimate if estimate is not None else queryset_estimate(queryset=qs)),
                                 exact=False)
    return result


ENDPOINT_COUNT_CAP = 1_000  # per endpoint and status: an endpoints page reads at most this many index entries each


def _message_statistics() -> tuple[float, dict, dict]:
    """PostgreSQL's statistics of the messages table, as the planner reads them: its rows now
    (rows per page at the last ANALYZE times its pages now: growth since is counted), the
    frequency of each (endpoint, status) pair it keeps (multivariate MCV list, migration 0014),
    and per column: value -> frequency, plus the frequency of a value it does not list."""
    table = ScheduledMessage._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.reltuples, c.relpages, pg_relation_size(c.oid) / current_setting('block_size')::int, "
            "  (SELECT json_agg(json_build_array(s.attname, s.most_common_vals::text::text[], s.most_common_freqs, "
            "                                    s.n_distinct, s.null_frac)) "
            "   FROM pg_stats s WHERE s.schemaname = current_schema() AND s.tablename = %s "
            "   AND s.attname IN ('endpoint_id', 'status')), "
            "  (SELECT json_build_array(x.attnames, x.most_common_vals, x.most_common_freqs) FROM pg_stats_ext x "
            "   WHERE x.schemaname = current_schema() AND x.tablename = %s "
            "   AND x.statistics_name = 'message_endpoint_status_stats') "
            "FROM pg_class c WHERE c.oid = %s::regclass", [table, table, table])
        reltuples, relpages, pages, columns, pairs = cursor.fetchone()
    if reltuples is None or reltuples < 0:  # never analysed
        return -1.0, {}, {}
    rows = reltuples / relpages * pages if relpages > 0 else float(reltuples)
    per_column = {}
    for name, values, freqs, n_distinct, null_frac in (json.loads(columns) if isinstance(columns, str) else columns) or ():
        values, freqs = values or [], freqs or []
        distinct = n_distinct if n_distinct >= 0 else -n_distinct * reltuples
        rest = max(0.0, 1.0 - null_frac - sum(freqs)) / max(1.0, distinct - len(values))
        per_column[name] = ({str(v): f for v, f in zip(values, freqs)}, rest)
    joint = {}
    if pairs:
        names, values, freqs = json.loads(pairs) if isinstance(pairs, str) else pairs
        where = {name: i for i, name in enumerate(names)}
        for combination, freq in zip(values or [], freqs or []):
            joint[(combination[where["endpoint_id"]], combination[where["status"]])] = freq
    return rows, per_column, joint


def endpoint_count_messages(*, endpoint_ids) -> dict[int, dict[str, Tally]]:
    """Endpoint id -> status -> its messages, in two queries whatever the page holds: the
    statistics, then for every pair in flight (pending, published: statistics are too slow for
    them) or estimated at most the cap, an exact count read no further than cap + 1 index
    entries. Above the cap, PostgreSQL's estimate. Counting every message of every endpoint
    read the whole table: the API's and the admin's endpoints pages took seconds at 50 M."""
    endpoint_ids = list(endpoint_ids)
    if not endpoint_ids:
        return {}
    rows, per_column, joint = _message_statistics()

    def estimate(endpoint_id: int, status: str) -> int | None:
        if rows < 0:
            return None
        if (str(endpoint_id), status) in joint:
            return round(rows * joint[str(endpoint_id), status])
        share = 1.0
        for column, value in (("endpoint_id", str(endpoint_id)), ("status", status)):
            values, rest = per_column.get(column, ({}, 0.0))
            share *= values.get(value, rest)
        return round(rows * share)

    cap = ENDPOINT_COUNT_CAP
    counted = [(e, s.value) for e in endpoint_ids for s in Status
               if s in IN_FLIGHT or (estimate(e, s.value) or 0) <= cap]
    found = {}
    if counted:
        # one part per partial index (message_endpoint_in_flight, _history): each states its statuses
        part = (f"SELECT p.e, p.s, (SELECT count(*) FROM (SELECT 1 FROM {ScheduledMessage._meta.db_table} m "
                f"WHERE m.endpoint_id = p.e AND m.status = p.s AND m.status = ANY(%s) LIMIT %s) x) "
                f"FROM unnest(%s::bigint[], %s::text[]) AS p(e, s)")
        parts, params = [], []
        for statuses in (sorted(_IN_FLIGHT), sorted(_FINISHED)):
            pairs = [(e, s) for e, s in counted if s in statuses]
            if pairs:
                parts.append(part)
                params += [statuses, cap + 1, [e for e, _ in pairs], [s for _, s in pairs]]
        with connection.cursor() as cursor:
            cursor.execute(" UNION ALL ".join(parts), params)
            found = {(e, s): n for e, s, n in cursor.fetchall()}
    counts = {}
    for endpoint_id in endpoint_ids:
        counts[endpoint_id] = {}
        for status in Status:
            n = found.get((endpoint_id, status.value))
            if n is not None and n <= cap:
                tally = Tally(n)
            else:
                tally = Tally(max(cap + 1, estimate(endpoint_id, status.value) or 0), exact=False)
            counts[endpoint_id][status.value] = tally
    return counts


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
    rows, per_column, _ = _message_statistics()
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
        messages = messages.filter(endpoint_id__in=Subquery(_endpoints_of(team_ids).values("id")))
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


# --- retention (services/retention.py) ---------------------------------------------------------

# When a finished message finished: finished_at, or for rows from before it was recorded the
# latest moment the row has (a failed one: its delivery, or its publishing if it was unroutable).
FINISHED_AT = Coalesce("finished_at", "cancelled_at", "delivered_at", "published_at", "created_at")


def message_list_past_retention(*, status: Status, cutoff: datetime):
    """Finished messages of one status that finished before ``cutoff``. A message finishes after
    it was accepted, so ``created_at < cutoff`` bounds the (status, created_at) index's range."""
    assert status in FINISHED, status
    return (ScheduledMessage.objects.filter(status=status, created_at__lt=cutoff)
            .alias(done_at=FINISHED_AT).filter(done_at__lt=cutoff).order_by())


def message_count_in_flight_created_before(*, cutoff: datetime) -> int:
    """Pending or published messages accepted before ``cutoff``: old, but never pruned."""
    return ScheduledMessage.objects.filter(status__in=IN_FLIGHT, created_at__lt=cutoff).order_by().count()


def message_table_get_bytes_per_row() -> float | None:
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


def message_table_is_autovacuumed() -> bool:
    """Whether PostgreSQL's autovacuum looks after the messages table: on for the server, and not
    turned off for the table."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('autovacuum') = 'on' AND NOT coalesce("
                       "'autovacuum_enabled=false' = ANY(reloptions), false) FROM pg_class WHERE oid = %s::regclass",
                       [ScheduledMessage._meta.db_table])
        return cursor.fetchone()[0]


# --- metrics (observability/metrics.py, metrics_figures.py) ------------------------------------


def endpoint_get_names(*, ids) -> dict[int, tuple[str, str]]:
    """Endpoint id -> (its team's name, its name), in one query."""
    return {id_: (team, name) for id_, team, name
            in Endpoint.objects.filter(id__in=ids).values_list("id", "team__name", "name")}


def topology_version_get_names(*, ids) -> dict[int, str]:
    return dict(TopologyVersion.objects.filter(id__in=ids).values_list("id", "name"))


@dataclass(frozen=True)
class Outbox:
    pending: dict[str, int]  # version -> native rows waiting for the relay
    oldest_created_at: datetime | None  # of those, the oldest


def outbox_get() -> Outbox:
    """The relay's backlog: native rows still pending (timeout-manager rows wait in the table by
    design until shortly before due; an overdue one is counted by ``message_count_overdue_by_version``)."""
    grouped = (ScheduledMessage.objects.filter(status=Status.PENDING, delivery_mode=DeliveryMode.NATIVE)
               .order_by().values("topology__name").annotate(n=Count("id"), oldest=Min("created_at")))
    rows = list(grouped)
    return Outbox({row["topology__name"]: row["n"] for row in rows},
                  min((row["oldest"] for row in rows), default=None))


def message_count_overdue_by_version(*, now: datetime, grace: timedelta) -> dict[str, int]:
    """Version -> messages still pending or published ``grace`` after their due time: what the
    accuracy report counts as lost (ACCURACY_LOST_AFTER_SECONDS)."""
    grouped = (ScheduledMessage.objects.filter(status__in=IN_FLIGHT, due_at__lt=now - grace)
               .order_by().values("topology__name").annotate(n=Count("id")))
    return {row["topology__name"]: row["n"] for row in grouped}


LEVEL_COUNT_TIMEOUT_MS = 2000  # the admin page's bound: a version with too many rows in flight shows no figure

_MESSAGES_BY_LEVEL_SQL = """
    WITH carried AS (  -- each row with the first due time of the broker message it went in (its envelope's)
        SELECT published_at,
               min(due_at) OVER (PARTITION BY endpoint_id, published_at, date_trunc('second', due_at)) AS first_due
        FROM scheduling_scheduledmessage
        WHERE topology_id = %(version)s AND status = 'published' AND attempts = 0 AND published_at IS NOT NULL
    ), timed AS (
        SELECT greatest(0, least(%(max_units)s, floor(
                   (extract(epoch FROM first_due - published_at) * 1000 - %(margin_ms)s) / %(unit_ms)s)))::bigint AS units,
               floor(extract(epoch FROM %(now)s - published_at) * 1000 / %(unit_ms)s)::bigint AS elapsed
        FROM carried
    )
    SELECT CASE WHEN elapsed < units THEN floor(log(2, (units # elapsed)::numeric))::int END AS level, count(*)
    FROM timed GROUP BY 1
"""


def topology_count_messages_by_level(*, version: TopologyVersion, now: datetime) -> dict[int | None, int] | None:
    """Level -> messages the rows say are in it now (None: past the last level, on their way to the
    endpoint), or None when counting took longer than LEVEL_COUNT_TIMEOUT_MS. The broker counts
    broker messages; with envelopes one carries many, so this is what the levels hold in messages.

    A message's broker message entered the cascade with ``units`` of delay; ``elapsed`` units later
    it is in the level of the highest bit where the two differ (the levels spend the set bits
    highest first: elapsed agrees with units above that level, and has not yet spent its bit).
    From the rows' publish and due times and the current arrival margin: a row published again
    (a retry, a rescue, a move) may be counted where its first copy would be."""
    plan = version.cascade
    params = {"version": version.id, "max_units": plan.max_delay_units, "margin_ms": conf().arrival_margin_ms,
              "unit_ms": plan.unit_ms, "now": now}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL statement_timeout = {LEVEL_COUNT_TIMEOUT_MS}")
        try:
            with transaction.atomic():
                cursor.execute(_MESSAGES_BY_LEVEL_SQL, params)
                return dict(cursor.fetchall())
        except OperationalError:  # cancelled by the timeout: too many rows in flight to count here
            return None

"""Reads of endpoints: lists, one by name, the loop's consumption and flow limits, and the
endpoints page's per-status counts (exact up to a cap, PostgreSQL's estimate above it)."""

from __future__ import annotations

import json

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Q

from scheduling.core.flow_gate import Limit
from scheduling.core.lifecycle import FINISHED_BY_INDEX, IN_FLIGHT, IN_FLIGHT_VALUES, Status
from scheduling.core.text import has_nul
from scheduling.db.counts import Tally
from scheduling.models import Endpoint, ScheduledMessage


def endpoint_list():
    return Endpoint.objects.select_related("topology")


def endpoint_get_consumption() -> dict[str, bool]:
    """Queue name -> whether platform workers should consume it (active endpoints only).
    Celery queues are left to the workers their owners run for them."""
    return dict(
        Endpoint.objects.exclude(handler=Endpoint.Handler.CELERY_QUEUE).values_list("queue", "is_active")
    )


def endpoint_any_task_queue() -> bool:
    """Whether any team has a ``celery_queue`` endpoint (whose overdue tasks the rescue looks for)."""
    return Endpoint.objects.filter(handler=Endpoint.Handler.CELERY_QUEUE).exists()


def endpoint_get_flow_limits() -> dict[str, Limit]:
    """Queue name -> the flow control of each endpoint that has any (the delivery loop's gate)."""
    limited = Endpoint.objects.filter(Q(max_deliveries_per_second__isnull=False) | Q(max_concurrent__isnull=False)
                                      | Q(max_deliveries_per_second_per_key__isnull=False)
                                      | Q(max_concurrent_per_key__isnull=False))
    return {name: Limit(endpoint_id, *limits) for name, endpoint_id, *limits
            in limited.values_list("queue", "id", "max_deliveries_per_second", "max_concurrent",
                                   "max_deliveries_per_second_per_key", "max_concurrent_per_key")}


def endpoint_list_in_teams(*, team_ids):
    """The endpoints of the teams ``team_ids`` (None: every team's), as a queryset to narrow."""
    return Endpoint.objects.all() if team_ids is None else Endpoint.objects.filter(team_id__in=team_ids)


def endpoint_get_named(*, name: str, team_ids=None, team: str | None = None) -> list[Endpoint]:
    """The endpoints called ``name`` in the teams ``team_ids`` (None: any), in the team named
    ``team`` if given: one, none, or (a name several teams use) more."""
    rows = endpoint_list_in_teams(team_ids=team_ids).select_related("team", "topology").filter(name=name)
    if team:
        rows = rows.filter(team__name=team)
    return list(rows.order_by("team__name")[:20])


ENDPOINT_COUNT_CAP = 1_000  # per endpoint and status: an endpoints page reads at most this many index entries each


def endpoint_get_one(*, name: str, team_ids=None) -> Endpoint | None:
    """The endpoint called ``name`` in the teams ``team_ids`` (None: any): None when none has
    one; ValidationError on ``team`` when several do (a name is unique within a team only)."""
    found = endpoint_get_named(name=name, team_ids=team_ids) if not has_nul(name) else []
    if len(found) > 1:
        teams = ", ".join(endpoint.team.name for endpoint in found)
        raise ValidationError({"team": f"several of your teams have an endpoint {name!r} ({teams}): give team"})
    return found[0] if found else None


def endpoint_count_messages(*, endpoint_ids) -> dict[int, dict[str, Tally]]:
    """Endpoint id -> status -> its messages, in two queries whatever the page holds: the
    statistics, then for every pair in flight (pending, published: statistics are too slow for
    them) or estimated at most the cap, an exact count read no further than cap + 1 index
    entries. Above the cap, PostgreSQL's estimate. Counting every message of every endpoint
    read the whole table: the API's and the admin's endpoints pages took seconds at 50 M."""
    endpoint_ids = list(endpoint_ids)
    if not endpoint_ids:
        return {}
    rows, per_column, joint = message_table_get_statistics()

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
               if s in IN_FLIGHT or s is Status.WAITING or (estimate(e, s.value) or 0) <= cap]
    found = {}
    if counted:
        # one part per partial index (message_endpoint_in_flight, _history, _ended; message_waiting): each
        # states its statuses
        part = (f"SELECT p.e, p.s, (SELECT count(*) FROM (SELECT 1 FROM {ScheduledMessage._meta.db_table} m "
                f"WHERE m.endpoint_id = p.e AND m.status = p.s AND m.status = ANY(%s) LIMIT %s) x) "
                f"FROM unnest(%s::bigint[], %s::text[]) AS p(e, s)")
        parts, params = [], []
        for statuses in (sorted(IN_FLIGHT_VALUES), *(sorted(group) for group in FINISHED_BY_INDEX),
                         [Status.WAITING.value]):
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


# --- metrics (observability/metrics.py, metrics_figures.py) ------------------------------------


def endpoint_get_labels_by_queue() -> dict[str, tuple[str, str]]:
    """Queue name -> (its team's name, the endpoint's name), in one query: what the delivery
    loop's spans name (tracing on only)."""
    return {queue: (team, name) for queue, team, name
            in Endpoint.objects.values_list("queue", "team__name", "name")}


def message_table_get_statistics() -> tuple[float, dict, dict]:
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

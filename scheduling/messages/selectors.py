"""Reads of scheduled messages: filtered lists, pages that stay flat as history grows (merged
from the partial indexes' ranges), attempts, search, the outbox, what is overdue and what waits for its
ordering key's turn."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import product

from django.db import connection
from django.db.models import Count, F, Max, Min, Q, Subquery
from django.db.models.expressions import RawSQL
from django.utils import timezone

from scheduling.config.conf import conf, setting_name
from scheduling.core.cursors import Position
from scheduling.core.durations import format_duration
from scheduling.core.lifecycle import (
    FINISHED_BY_INDEX,
    IN_FLIGHT,
    IN_FLIGHT_VALUES,
    ORDER_OPEN_VALUES,
    Status,
    sql_list,
)
from scheduling.db.sql import uuid_array
from scheduling.endpoints.selectors import endpoint_list_in_teams
from scheduling.models import (
    DeliveryMode,
    Endpoint,
    MessageAttempt,
    OrderingTurn,
    ScheduledMessage,
    TopologyVersion,
)
from topology.cascade import UNIT_MS


def message_list_attempts(*, message_id):
    """A message's attempts in the order they were made (started_at, then id: newest last), read
    by its index (message, started_at)."""
    return MessageAttempt.objects.filter(message_id=message_id).order_by("started_at", "id")


def message_list_matching(*, endpoint: str | None = None, status: str | None = None, schedule: str | None = None,
                          due_before: datetime | None = None, due_after: datetime | None = None,
                          created_before: datetime | None = None, created_after: datetime | None = None,
                          team_ids=None):
    """The messages a bulk action names by filters (bounds exclusive), of the teams ``team_ids``
    (None: every team); ids only are read from it."""
    qs = ScheduledMessage.objects.all()
    if team_ids is not None:
        qs = qs.filter(endpoint_id__in=Subquery(endpoint_list_in_teams(team_ids=team_ids).values("id")))
    if endpoint:
        named = endpoint_list_in_teams(team_ids=team_ids).filter(name=endpoint)
        qs = qs.filter(endpoint_id__in=Subquery(named.values("id")))
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
        qs = qs.filter(endpoint_id__in=Subquery(endpoint_list_in_teams(team_ids=team_ids).values("id")))
    if schedule:
        qs = qs.filter(schedule=schedule)
    if endpoint_id is not None:
        qs = qs.filter(endpoint_id=endpoint_id)
    if status:
        qs = qs.filter(status=status)
    return qs


# --- lists that stay flat as history grows -----------------------------------------------------
#
# A page of messages is read newest first (or by due time) through an index, never by sorting or
# counting the table: with 50 M finished rows a sort of one endpoint's history took seconds and an
# exact count of it hundreds of milliseconds (docs/operations/performance.md, "History"). When the filters
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
        endpoints = endpoint_list_in_teams(team_ids=team_ids).order_by("id")
        team_endpoints = list(endpoints.values_list("id", flat=True)[:TEAM_GROUPS_MAX])
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
    """The first ``limit`` rows of the groups' ranges merged. Groups of finished (per partial
    index: the history's, the later final statuses') and of in-flight statuses are read apart,
    each with its statuses written out, so that PostgreSQL may use the partial indexes of each (a status that is only a LATERAL parameter proves neither predicate).
    Waiting messages (an ordering key's turn; few) are a class of their own: no partial index of the
    others holds them."""
    classes = [[g for g in groups if g.get("status") in statuses]
               for statuses in (*FINISHED_BY_INDEX, IN_FLIGHT_VALUES, {Status.WAITING.value})]
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
    LIMIT (through message_endpoint_history / _ended / _in_flight, or message_status_created)."""
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


def message_estimate_in_past() -> int | None:
    """Messages scheduled in the past, as their partial index counted them at its last VACUUM
    or ANALYZE: the planner's own guess for due_at < created_at is a third of the table."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass('message_in_past_created')")
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None and row[0] >= 0 else None


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


# Celery-queue endpoints: the user's workers consume their queues, not the delivery loop. A task
# travels with no eta, so its delay is rounded up to whole units (wire.cascade_units): it leaves the
# cascade up to a unit after due, on time; its rescue (messages/rescue.py) and this count start there.
TASK_HANDLERS = (Endpoint.Handler.CELERY_QUEUE,)
TASK_ROUNDING_MS = UNIT_MS


def message_count_overdue_in_flight(*, now: datetime, overdue_by: timedelta) -> dict[tuple[str, str], int]:
    """(team, endpoint) -> first deliveries still pending or published more than ``overdue_by``
    (the rescue's delay; a Celery queue's tasks, a cascade unit more) after due, of active
    endpoints (a paused one's wait on purpose): only the
    endpoints that have some. Reads the in-flight due index (message_in_flight_due) from its start
    to the cutoff, so its cost is the overdue rows, a handful when all is well."""
    tasks_due_before = now - overdue_by - timedelta(milliseconds=TASK_ROUNDING_MS)  # they leave a unit late
    grouped = (ScheduledMessage.objects.filter(status__in=IN_FLIGHT, due_at__lt=now - overdue_by, attempts=0,
                                               endpoint__is_active=True)
               .exclude(endpoint__handler__in=TASK_HANDLERS, due_at__gte=tasks_due_before)
               .order_by().values("endpoint__team__name", "endpoint__name").annotate(n=Count("id")))
    return {(row["endpoint__team__name"], row["endpoint__name"]): row["n"] for row in grouped}


def message_count_overdue_by_version(*, now: datetime, grace: timedelta) -> dict[str, int]:
    """Version -> messages still pending or published ``grace`` after their due time: what the
    accuracy report counts as lost (ACCURACY_LOST_AFTER_SECONDS)."""
    grouped = (ScheduledMessage.objects.filter(status__in=IN_FLIGHT, due_at__lt=now - grace)
               .order_by().values("topology__name").annotate(n=Count("id")))
    return {row["topology__name"]: row["n"] for row in grouped}


def message_load_task_payloads(*, rows: list[ScheduledMessage]) -> None:
    """A Celery queue's row carries its task message in the payload, which the publishers lock
    without (wire.PUBLISH_FIELDS: decoding payloads costs ~0.1 ms a row): load those rows' payloads
    in one query. The relay and the fan-out share it."""
    tasks = [row for row in rows if row.endpoint.handler == Endpoint.Handler.CELERY_QUEUE]
    if tasks:
        payloads = dict(ScheduledMessage.objects.filter(id__in=[r.id for r in tasks]).values_list("id", "payload"))
        for row in tasks:
            row.payload = payloads[row.id]


# What each waiting message waits for (issue 49): its key's live holder (a webhook call or task still out,
# messages/ordering.py), else the first open message of its key due before it, as the turn decides
# (messages/ordering._EARLIER: the same probe of message_ordering). Both are of its own endpoint.
_WAITING_FOR = f"""
SELECT c.id, COALESCE(
    (SELECT t.holder_id FROM {OrderingTurn._meta.db_table} t
     WHERE t.endpoint_id = c.e AND t.key = c.key AND t.holder_id <> c.id
       AND t.holder_until > statement_timestamp()),
    (SELECT p.id FROM {ScheduledMessage._meta.db_table} p
     WHERE p.endpoint_id = c.e AND p.ordering_key = c.key
       AND p.status IN ({sql_list(ORDER_OPEN_VALUES)})
       AND (p.due_at, p.created_at, p.id) < (c.due_at, c.created_at, c.id)
     ORDER BY p.due_at, p.created_at, p.id LIMIT 1))
FROM unnest(%s::uuid[], %s::bigint[], %s::text[], %s::timestamptz[], %s::timestamptz[])
     AS c(id, e, key, due_at, created_at)
"""


def message_list_waiting_for(*, messages) -> dict[str, str | None]:
    """Message id -> the id of the message it waits for, for those of ``messages`` that are
    ``waiting`` (the others are left out): its ordering key's live holder, else the first open
    message of its key due before it; None when neither is left (its wake is on its way, or the
    sweep's). One statement for a whole page, none when nothing on it waits: computed on read, so
    it is never stale and costs no column. Only ids of the message's own endpoint are answered."""
    waiting = [m for m in messages if m.status == Status.WAITING and m.ordering_key is not None]
    if not waiting:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_WAITING_FOR, [uuid_array(m.id for m in waiting), [m.endpoint_id for m in waiting],
                                      [m.ordering_key for m in waiting], [m.due_at for m in waiting],
                                      [m.created_at for m in waiting]])
        return {str(i): str(first) if first else None for i, first in cursor.fetchall()}


def message_count_waiting() -> dict[tuple[str, str], int]:
    """(team, endpoint) -> messages waiting for their ordering key's turn, of the endpoints that have
    some: read from the waiting index (message_waiting), so it costs the waiting rows only."""
    grouped = (ScheduledMessage.objects.filter(status=Status.WAITING)
               .order_by().values("endpoint__team__name", "endpoint__name").annotate(n=Count("id")))
    return {(row["endpoint__team__name"], row["endpoint__name"]): row["n"] for row in grouped}


def message_describe_gone(*, message_id) -> str:
    """What a client reads for an id the table does not have: it may have been archived."""
    settings = conf()
    return (f"no message {message_id}: finished messages are archived and removed "
            f"{format_duration(settings.retention)} after they finish ({setting_name('retention')}; failed and "
            f"expired ones after {format_duration(settings.failed_retention)}, {setting_name('failed_retention')})")

"""The notifications' outbox (issue 48): a fact becomes one pending message per endpoint that takes
it, written in the transaction of the fact it reports; publishing them after the commit is the
caller's (notifying.py does it through the relay; the relay's own expiry, which the relay's module
imports, hands its own publisher in: messages/expiry.py). Without the relay here, every part the
relay imports may tell what it does.

Bounded work: one query for the messages, one for the routes and endpoints, one COPY for the rows:
a statement per batch, not per row (a batch with nothing to say costs nothing: the callers pass
only the ids that need one). A message that is itself a notification or a callback never emits (no
loops). A notification the team's quota refuses is dropped, logged and counted; nothing here raises
into the delivery path.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

import orjson
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from uuid_utils.compat import uuid7

from scheduling.core import lifecycle
from scheduling.core.clock import ceil_ms
from scheduling.core.lifecycle import Status
from scheduling.db.sql import uuid_array
from scheduling.models import (
    Endpoint,
    MessageAttempt,
    NotificationRoute,
    NotificationType,
    ScheduledMessage,
    Team,
)
from scheduling.observability import metrics
from scheduling.teams.quotas import team_admit_in_flight

log = logging.getLogger(__name__)

# the handlers a notification can go to: a Celery queue takes tasks, not this JSON
TAKES_NOTIFICATIONS = (Endpoint.Handler.WEBHOOK, Endpoint.Handler.NONE, Endpoint.Handler.CELERY_TASK)


@dataclass
class Fact:
    """What happened, once: its type, its team, and the parts of the body that describe it.
    ``to``: a callback's endpoint (one message there); None: every route of the team taking ``type``."""

    type: str
    team_id: int
    message: dict | None = None
    endpoint: dict | None = None
    quota: dict | None = None
    to: int | None = None
    about_endpoint: int | None = None  # an endpoint fact's endpoint: never told about itself


@dataclass
class Emitted:
    rows: list = field(default_factory=list)
    dropped: int = 0


def iso(value: datetime | None) -> str | None:
    """A time as the bodies show it: UTC, with Z."""
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def _body(fact: Fact, *, row_id, created_at: datetime, team_name: str) -> dict:
    """The documented shape (docs/guides/notifications.md#the-json-shape): keep it stable."""
    body = {"type": fact.type, "id": str(row_id), "created_at": iso(created_at), "team": team_name}
    for part in ("message", "endpoint", "quota"):
        if getattr(fact, part) is not None:
            body[part] = getattr(fact, part)
    return body


def notification_write(*, facts: list[Fact]) -> Emitted:
    """Write each fact's messages, pending, in the caller's transaction (a savepoint: a failure
    here is logged and counted, never raised). Returns the rows made (for the caller to publish
    after the commit; the sweeper publishes them otherwise) and how many the quota dropped."""
    if not facts:
        return Emitted()
    try:
        with transaction.atomic():
            return _emit(facts)
    except Exception:  # never into the delivery path: the savepoint is rolled back, the fact stands
        log.exception("notifications not made: %d fact(s) dropped", len(facts))
        metrics.notifications_counted([(f.type, "error") for f in facts])
        return Emitted(dropped=len(facts))


def _targets(facts: list[Fact]) -> dict[int, list[Endpoint]]:
    """Fact index -> the endpoints it goes to (routes of its team taking its type, or its callback's
    endpoint), active ones of its team that take notifications: one query for the routes, one for
    the endpoints."""
    teams = {f.team_id for f in facts if f.to is None}
    routes = list(NotificationRoute.objects.filter(team_id__in=teams).values_list(
        "team_id", "endpoint_id", "events")) if teams else []
    wanted = {e for _, e, _ in routes} | {f.to for f in facts if f.to is not None}
    endpoints = {e.pk: e for e in Endpoint.objects.select_related("topology", "team").filter(
        id__in=wanted, is_active=True, handler__in=TAKES_NOTIFICATIONS)} if wanted else {}
    found: dict[int, list[Endpoint]] = {}
    for index, fact in enumerate(facts):
        if fact.to is not None:
            ids = [fact.to]
        else:
            ids = [e for team, e, events in routes if team == fact.team_id and fact.type in events]
        found[index] = [endpoints[e] for e in ids
                        if e in endpoints and endpoints[e].team_id == fact.team_id and e != fact.about_endpoint]
    return found


def _emit(facts: list[Fact]) -> Emitted:
    now = ceil_ms(timezone.now())
    targets = _targets(facts)
    per_team: dict[int, list[ScheduledMessage]] = {}
    teams: dict[int, Team] = {}
    for index, fact in enumerate(facts):
        for endpoint in targets[index]:
            teams[endpoint.team_id] = endpoint.team
            row_id = uuid7()
            body = _body(fact, row_id=row_id, created_at=now, team_name=endpoint.team.name)
            encoded = orjson.dumps(body).decode()
            row = ScheduledMessage.new(
                id=row_id, status=lifecycle.transition(lifecycle.NEW, lifecycle.Event.SCHEDULE),
                endpoint=endpoint, delivery_mode=endpoint.delivery_mode, payload=body, due_at=now,
                requested_delay_ms=0, created_at=now, notification=fact.type)
            row.status, row.published_at = Status.PENDING, None
            row.payload_json, row.payload_bytes = encoded, len(encoded.encode())
            per_team.setdefault(endpoint.team_id, []).append(row)
    emitted = Emitted()
    counted = []
    for team_id, rows in sorted(per_team.items()):  # team locks in id order, as message_schedule_many takes them
        admitted = team_admit_in_flight(team=teams[team_id], sizes=[r.payload_bytes for r in rows], partial=True)
        kept, dropped = rows[:admitted.count], rows[admitted.count:]
        if dropped:
            log.warning("%d notification(s) of team %s dropped: %s", len(dropped), teams[team_id].name,
                        admitted.refusal)
        emitted.rows += kept
        emitted.dropped += len(dropped)
        counted += [(r.notification, "made") for r in kept] + [(r.notification, "dropped") for r in dropped]
    ScheduledMessage.objects.insert_many(emitted.rows)
    metrics.notifications_counted(counted)
    return emitted


# --- the facts of messages ------------------------------------------------------------------------

_ENDED = f"""
SELECT m.id, m.endpoint_id, e.team_id, e.name, m.event_id, m.status, m.attempts, m.last_error, m.due_at,
       m.delivered_at, m.finished_at, m.on_delivered_id, m.on_failed_id,
       (SELECT a.status_code FROM {MessageAttempt._meta.db_table} a WHERE a.message_id = m.id
        ORDER BY a.started_at DESC, a.number DESC LIMIT 1)
FROM {ScheduledMessage._meta.db_table} m JOIN {Endpoint._meta.db_table} e ON e.id = m.endpoint_id
WHERE m.id = ANY(%s::uuid[]) AND m.notification IS NULL
"""


def _message_part(row) -> dict:
    (message_id, _, _, endpoint, event_id, status, attempts, last_error, due_at, delivered_at, finished_at,
     _, _, status_code) = row
    part = {"id": str(message_id), "endpoint": endpoint, "event": str(event_id) if event_id else None,
            "status": status, "attempts": attempts, "last_status_code": status_code,
            "last_error": last_error or None, "due_at": iso(due_at), "delivered_at": iso(delivered_at)}
    if status == Status.FAILED:
        part["failed_at"] = iso(finished_at)
    elif status == Status.EXPIRED:
        part["expired_at"] = iso(finished_at)
    return part


def notification_write_ended(*, delivered=(), failed=(), failing=(), expired=()) -> Emitted:
    """The facts of messages, as their rows are now (in the caller's transaction): ``failed``, ids
    whose handler gave up (the team's message.failed routes, and the message's on_failed callback);
    ``expired``, ids that just expired (message.expired to the team's routes for it and to the
    on_failed callback: a failure to deliver too); ``failing``, ids whose ATTEMPT_FAILING_AT-th
    attempt in a row just failed; ``delivered``, ids just delivered that have an on_delivered
    callback. One query for all of them. Callers pass each id once, where its row changed status."""
    ids = {str(i) for i in (*delivered, *failed, *failing, *expired)}
    if not ids:
        return Emitted()
    try:
        with transaction.atomic(), connection.cursor() as cursor:  # a savepoint: an error here rolls back alone
            cursor.execute(_ENDED, [uuid_array(sorted(ids))])
            rows = {str(r[0]): r for r in cursor.fetchall()}
    except DatabaseError:
        log.exception("notifications of %d message(s) not made", len(ids))
        return Emitted()
    facts = []
    for kind, of in ((NotificationType.MESSAGE_FAILED, failed), (NotificationType.MESSAGE_EXPIRED, expired)):
        for message_id in (str(i) for i in of):
            if (row := rows.get(message_id)) is not None:
                facts.append(Fact(kind, row[2], message=_message_part(row)))
                if row[12] is not None:  # its on_failed endpoint
                    facts.append(Fact(kind, row[2], message=_message_part(row), to=row[12]))
    for message_id in (str(i) for i in failing):
        if (row := rows.get(message_id)) is not None:
            facts.append(Fact(NotificationType.MESSAGE_ATTEMPT_FAILING, row[2], message=_message_part(row)))
    for message_id in (str(i) for i in delivered):
        if (row := rows.get(message_id)) is not None and row[11] is not None:
            facts.append(Fact(NotificationType.MESSAGE_DELIVERED, row[2], message=_message_part(row), to=row[11]))
    return notification_write(facts=facts)

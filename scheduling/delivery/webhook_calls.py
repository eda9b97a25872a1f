"""Webhook deliveries around a call made outside any transaction: take the rows (a lease), call
(the engine: delivery/webhooks.py), record what came of it. Each step is one set-based statement
per batch.

At least once, written down: taking a row leases it until its call's deadline and a margin. A copy
of the message arriving meanwhile (a rescue copy, the broker's redelivery) waits for the lease; the
result is recorded only under the lease it was called with. A worker killed mid-call leaves its
broker message unacked: the broker hands it to another worker, which calls again once the lease
has passed. So a receiver can see a call twice (the first one's answer lost with the worker); it
tells them apart by ``webhook-id``, the message id, the same on every attempt.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

import orjson
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from scheduling.audit import actions
from scheduling.audit.context import AuditContext, audited
from scheduling.audit.services import audit_record
from scheduling.config.conf import conf
from scheduling.core import backoff, lifecycle
from scheduling.core.clock import from_epoch_ms
from scheduling.core.lifecycle import Status
from scheduling.core.ordering import Turn
from scheduling.core.text import nul_replaced
from scheduling.db.sql import execute_prepared, int_array, uuid_array
from scheduling.delivery import pushback
from scheduling.delivery.log import delivery_log_on_commit
from scheduling.delivery.minutes import delivery_minute_record
from scheduling.delivery.overlap import schedule_count_overlap_skipped
from scheduling.delivery.services import Handover, Outcome, Result, delivery_drop_misrouted
from scheduling.delivery.webhooks import CallResult
from scheduling.messages import wire
from scheduling.messages.notifying import notification_emit
from scheduling.messages.ordering import ordering_end, ordering_hold, ordering_take
from scheduling.models import (
    AttemptOutcome,
    Endpoint,
    EndpointHealth,
    MessageAttempt,
    NotificationType,
    ScheduledMessage,
    Trigger,
)
from scheduling.notifications.services import (
    notification_attempt_failing,
    notification_emit_ended,
    notification_endpoint_fact,
)
from scheduling.observability import metrics, webhook_metrics

log = logging.getLogger(__name__)

LEASE_MARGIN_SECONDS = 5.0  # past the call's deadline: recording its result after the call
MESSAGES = ScheduledMessage._meta.db_table
ENDPOINTS = Endpoint._meta.db_table
ATTEMPTS = MessageAttempt._meta.db_table


@dataclass
class Taken:
    """A row taken for its call: what the call and its record need."""

    message_id: str
    attempt: int
    lease_until: datetime
    taken_at: datetime
    endpoint_id: int
    topology_id: int
    payload: object
    due_at: datetime
    created_at: datetime
    trigger: str
    throttled_ms: int | None
    expires_at: datetime | None = None  # a failed call's retry after it: expired instead
    team_id: int | None = None  # the endpoint's team: the caller fills it in from its endpoint profile
    ordering_key: str | None = None  # its key's turn is released when its call is recorded (messages/ordering.py)


def _taken(row: tuple) -> Taken:
    """A row of _TAKE's or _TAKE_KEYED's RETURNING, by name (the keyed one adds the team, NULL, and
    the ordering key); the payload comes as raw jsonb text."""
    (message_id, attempt, lease_until, taken_at, endpoint_id, topology_id, payload, due_at, created_at, trigger,
     throttled_ms, expires_at, *keyed) = row
    team_id, ordering_key = keyed or (None, None)
    return Taken(message_id=str(message_id), attempt=attempt, lease_until=lease_until, taken_at=taken_at,
                 endpoint_id=endpoint_id, topology_id=topology_id,
                 payload=orjson.loads(payload) if isinstance(payload, str) else payload, due_at=due_at,
                 created_at=created_at, trigger=trigger, throttled_ms=throttled_ms, expires_at=expires_at,
                 team_id=team_id, ordering_key=ordering_key)


class CallToken(NamedTuple):
    """What the delivery loop keeps with a call (Call.token) to settle it once recorded: the copy
    it holds (worker/holding.py's Held), the row it took and leased (what the record compares),
    the broker session the copy came on, and the max_concurrent slot the call took, if any."""

    held: object
    row: Taken
    session: int
    slot: int | None


_IN_FLIGHT = lifecycle.sql_list(lifecycle.IN_FLIGHT)  # the status of a row a call may still take or record

_TAKE = f"""
WITH c AS (SELECT * FROM unnest(%s::uuid[], %s::int[], %s::bigint[], %s::bigint[], %s::float8[], %s::text[])
           AS c(id, attempt, due_ms, throttled_ms, lease_s, queue)),
t AS (
    SELECT r.id, c.attempt, c.throttled_ms, c.lease_s FROM c CROSS JOIN LATERAL (
        SELECT m.id FROM {MESSAGES} AS m JOIN {ENDPOINTS} AS e ON e.id = m.endpoint_id
        WHERE m.id = c.id AND m.status IN ({_IN_FLIGHT}) AND m.attempts = c.attempt
          AND (c.queue IS NULL OR e.queue = c.queue)
          AND (c.attempt > 0 OR c.due_ms IS NULL OR floor(extract(epoch FROM m.due_at) * 1000)::bigint = c.due_ms)
          AND m.due_at <= statement_timestamp()
          AND (m.expires_at IS NULL OR m.expires_at > statement_timestamp())
          AND (m.call_lease_until IS NULL OR m.call_lease_until < statement_timestamp())
          AND m.ordering_key IS NULL
        FOR UPDATE OF m) AS r)
UPDATE {MESSAGES} AS m
SET call_lease_until = statement_timestamp() + make_interval(secs => t.lease_s),
    delivery_count = m.delivery_count + (t.attempt = 0)::int
FROM t WHERE m.id = t.id
RETURNING m.id, t.attempt, m.call_lease_until, statement_timestamp(), m.endpoint_id, m.topology_id, m.payload,
          m.due_at, m.created_at, m.trigger, t.throttled_ms, m.expires_at
"""

# a keyed row whose turn it is (locked and checked by the caller): its lease, as _TAKE's; a waiting one
# woken and published at once (its copy is in hand, so the relay must not publish it again)
_TAKE_KEYED = f"""
UPDATE {MESSAGES} AS m
SET call_lease_until = statement_timestamp() + make_interval(secs => c.lease_s),
    delivery_count = m.delivery_count + (c.attempt = 0)::int,
    status = CASE WHEN m.status = '{Status.WAITING.value}' THEN '{Status.PUBLISHED.value}' ELSE m.status END
FROM unnest(%s::uuid[], %s::int[], %s::bigint[], %s::float8[]) AS c(id, attempt, throttled_ms, lease_s)
WHERE m.id = c.id
RETURNING m.id, c.attempt, m.call_lease_until, statement_timestamp(), m.endpoint_id, m.topology_id, m.payload,
          m.due_at, m.created_at, m.trigger, c.throttled_ms, m.expires_at, NULL, m.ordering_key
"""


def webhook_call_take(*, items: list[Handover | tuple], deadlines: dict[str, float]) -> tuple[dict[str, Taken], dict[str, Outcome]]:
    """Lease the rows of ``items`` (Handovers, or tuples in its order: a row of another endpoint
    than the copy's queue is not taken, MISROUTED) for their calls; ``deadlines``: how long each is held (s), before
    the margin.
    Returns the rows taken, and for the others what they are (duplicate, cancelled, superseded,
    early, expired (a row in flight past its expires_at is expired here), unknown, or BUSY: another
    call of it holds the lease), sorted out only when there are any.
    Outside a transaction: the statement commits on its own."""
    items = [Handover(*item) for item in items]
    valid = [item for item in items if wire.is_row_id(item.message_id)]
    taken: dict[str, Taken] = {}
    if valid:
        rows = execute_prepared(_TAKE, [
            uuid_array(i.message_id for i in valid), int_array(i.attempt for i in valid),
            int_array(i.due_ms for i in valid), int_array(i.throttled_ms for i in valid),
            [deadlines[i.message_id] + LEASE_MARGIN_SECONDS for i in valid], [i.queue for i in valid]])
        for row in rows:
            t = _taken(row)
            taken[t.message_id] = t
    # the first copy of each row taken went to its call; a second copy of it (in this very batch)
    # waits for that call
    seen: set[str] = set()
    others: dict[str, Outcome] = {}
    left = []
    for item in items:
        if item.message_id in taken and item.message_id not in seen:
            seen.add(item.message_id)
        elif item.message_id in taken:
            others[item.message_id] = Outcome(Result.BUSY, attempt=item.attempt)
        else:
            left.append(item)
    if left:
        others.update(_sort_out(left, deadlines, taken))
    return taken, others


def _sort_out(items: list[Handover], deadlines: dict[str, float], taken: dict[str, Taken]) -> dict[str, Outcome]:
    """What each copy not taken is; attempt-0 duplicates counted in delivery_count (one statement).
    Keyed rows (never taken by _TAKE) that could be are taken here in their key's turn, into ``taken``."""
    ids = [i.message_id for i in items if wire.is_row_id(i.message_id)]
    rows = {str(r[0]): r[1:] for r in ScheduledMessage.objects.filter(id__in=ids).values_list(
        "id", "status", "attempts", "due_at", "call_lease_until", "endpoint_id", "topology_id", "endpoint__queue",
        "expires_at", "ordering_key")}
    now = timezone.now()
    outcomes, duplicates, counted, misrouted, expiring, keyed = {}, [], [], [], [], {}
    for message_id, attempt, due_ms, throttled_ms, queue in items:
        row = rows.get(message_id)
        if row is None:
            outcomes[message_id] = Outcome(Result.UNKNOWN)  # no row: the loop sets the copy aside (orphans.py)
            continue
        status, attempts, due_at, lease, endpoint_id, topology_id, endpoint_queue, expires_at, key = row
        if key is not None and status in lifecycle.ORDER_OPEN and attempts == attempt and due_at <= now \
                and not lifecycle.expired(lifecycle.State(status=status, due_at=due_at, expires_at=expires_at),
                                          now=now) and (lease is None or lease < now) \
                and not lifecycle.superseded(lifecycle.State(status=status, due_at=due_at), attempt=attempt,
                                             due_ms=due_ms):
            if message_id in keyed:  # a second copy in this batch: it waits for the first one's call
                outcomes[message_id] = Outcome(Result.BUSY, attempt=attempt)
            else:
                keyed[message_id] = (message_id, attempt, throttled_ms)
            continue
        if queue is not None and endpoint_queue != queue:
            outcomes[message_id] = Outcome(Result.MISROUTED)
            misrouted.append(delivery_drop_misrouted(message_id=message_id, queue=queue))
            continue
        state = lifecycle.State(status=status, due_at=due_at, attempts=attempts, expires_at=expires_at)
        labels = _Row(endpoint_id, topology_id)
        if lifecycle.superseded(state, attempt=attempt, due_ms=due_ms):
            outcomes[message_id] = Outcome(Result.SUPERSEDED)
            counted.append(metrics.Counted(metrics.SUPERSEDED, labels))
        elif status == Status.SUPERSEDED:  # a newer message with its debounce key replaced it: dropped
            outcomes[message_id] = Outcome(Result.SUPERSEDED)
            counted.append(metrics.Counted(metrics.SUPERSEDED, labels))
        elif status == Status.EXPIRED:  # expired before: acked, nothing else
            outcomes[message_id] = Outcome(Result.EXPIRED)
        elif status in lifecycle.IN_FLIGHT and attempts == attempt and due_at <= now \
                and lifecycle.expired(state, now=now):
            outcomes[message_id] = Outcome(Result.EXPIRED)
            expiring.append((message_id, attempt, labels))
        elif status == Status.CANCELLED:
            outcomes[message_id] = Outcome(Result.CANCELLED)
            counted.append(metrics.Counted(metrics.CANCELLED_ARRIVALS, labels))
            duplicates += [message_id] if attempt == 0 else []
        elif status in lifecycle.IN_FLIGHT and attempts == attempt and due_at > now:
            outcomes[message_id] = Outcome(Result.EARLY, attempt=attempt, eta=due_at)
        elif status in lifecycle.IN_FLIGHT and attempts == attempt:
            outcomes[message_id] = Outcome(Result.BUSY, attempt=attempt)  # leased: its call is out
        else:
            outcomes[message_id] = Outcome(Result.DUPLICATE)
            counted.append(metrics.Counted(metrics.DUPLICATES, labels))
            duplicates += [message_id] if attempt == 0 else []
    if duplicates:
        ScheduledMessage.objects.filter(id__in=duplicates).update(delivery_count=F("delivery_count") + 1)
    if keyed:
        outcomes.update(_take_keyed(list(keyed.values()), deadlines, taken, counted))
    counted += _expire(expiring, now)
    metrics.record(counted)
    metrics.misrouted(misrouted)
    return outcomes


def _take_keyed(items: list[tuple], deadlines: dict[str, float], taken: dict[str, Taken],
                counted: list) -> dict[str, Outcome]:
    """Keyed copies (id, attempt, throttled ms) that could be called: in one transaction, their rows
    locked and checked again, their keys' turns taken (one call per key at a time); those whose turn
    it is are leased as _TAKE leases (into ``taken``), with their key held until the lease; the
    others are set waiting (WAITING: acked) or, taken by another call meanwhile, BUSY."""
    outcomes: dict[str, Outcome] = {}
    with transaction.atomic():
        now = timezone.now()
        rows = {str(m.id): m for m in ScheduledMessage.objects.select_for_update().filter(
            id__in=[i[0] for i in items]).order_by("id").only(
            "id", "status", "attempts", "due_at", "created_at", "expires_at", "call_lease_until", "endpoint_id",
            "topology_id", "ordering_key", "waiting_since", "overlap", "schedule", "finished_at", "last_error")}
        ready = []
        for message_id, attempt, throttled_ms in items:
            m = rows.get(message_id)
            if m is None or m.status not in lifecycle.ORDER_OPEN or m.attempts != attempt \
                    or (m.call_lease_until and m.call_lease_until >= now) or lifecycle.expired(m, now=now):
                outcomes[message_id] = Outcome(Result.BUSY, attempt=attempt)  # moved meanwhile: looked at again
            else:
                ready.append((m, attempt, throttled_ms))
        turns = ordering_take(candidates=[m for m, _, _ in ready], now=now, chain=False)
        go = [(m, a, t) for m, a, t in ready if turns[str(m.id)].turn is Turn.GO]
        if go:
            for row in execute_prepared(_TAKE_KEYED, [
                    uuid_array(str(m.id) for m, _, _ in go), int_array(a for _, a, _ in go),
                    int_array(t for _, _, t in go),
                    [deadlines[str(m.id)] + LEASE_MARGIN_SECONDS for m, _, _ in go]]):
                t = _taken(row)
                taken[t.message_id] = t
            ordering_hold(held=[(t.endpoint_id, t.ordering_key, t.message_id, t.lease_until)
                                for t in taken.values() if t.ordering_key is not None])
        waiting = [m for m, _, _ in ready if turns[str(m.id)].turn is Turn.WAIT]
        for m in waiting:
            if m.status != Status.WAITING:
                m.save(update_fields=lifecycle.apply(m, lifecycle.wait(m, now=now)))
                counted.append(metrics.Counted(metrics.ORDERING_WAITS, m))
        skipped = [m for m, _, _ in ready if turns[str(m.id)].turn is Turn.SKIP]
        for m in skipped:  # a schedule's run its overlap policy does not send: ended at once
            m.save(update_fields=lifecycle.apply(m, lifecycle.skip(m, now=now, reason=turns[str(m.id)].reason)))
        if skipped:
            counted += schedule_count_overlap_skipped(runs=skipped)
        for m, attempt, _ in ready:
            if turns[str(m.id)].turn is not Turn.GO:
                outcomes[str(m.id)] = Outcome(Result.WAITING if turns[str(m.id)].turn is Turn.WAIT
                                              else Result.SKIPPED, attempt=attempt)
    return outcomes


def _expire(expiring: list[tuple[str, int, object]], now: datetime) -> list:
    """Expire the rows of copies that came past their expires_at (compare-and-set on the status
    and attempt the copy was judged by, and no call lease out), each told (message.expired) in its
    transaction; returns what the rows expired count."""
    counted = []
    for message_id, attempt, labels in expiring:
        with transaction.atomic():
            message = (ScheduledMessage.objects.select_for_update().filter(
                id=message_id, status__in=lifecycle.sources(lifecycle.Event.EXPIRE) & lifecycle.IN_FLIGHT,
                attempts=attempt).only("id", "status", "due_at", "expires_at", "call_lease_until").first())
            if message is None or (message.call_lease_until and message.call_lease_until > now) \
                    or not lifecycle.expired(message, now=now):
                continue
            message.save(update_fields=lifecycle.apply(message, lifecycle.expire(message, now=now)))
            notification_emit_ended(expired=[message.id])  # in its transaction (a notification itself: nothing)
        counted.append(metrics.Counted(metrics.EXPIRED, labels))
    return counted


@dataclass(frozen=True)
class _Row:
    """What the metrics' labels and the delivery log read of a message."""

    endpoint_id: int
    topology_id: int
    id: str = ""
    lateness_ms: int | None = None
    attempts: int = 0
    delivered_at: datetime | None = None
    endpoint_team_id: int | None = None


@dataclass
class Recorded:
    """What the loop does next: per message id its outcome; per endpoint id until when its calls
    pause (Retry-After, an open circuit); the endpoints disabled now."""

    outcomes: dict[str, Outcome]
    paused: dict[int, datetime]
    disabled: list[int]


# The record statements test the status "IS TRUE" (the same rows) to keep it out of the index conditions:
# their rows are found by id, whatever the statistics say (models/querysets.py deliver_many does the same;
# the take locks each row by id in a lateral subquery). A plan that scanned the in-flight rows by status
# cost a batch as much as the backlog.
_DELIVERED = f"""
UPDATE {MESSAGES} AS m
SET status = '{Status.DELIVERED.value}', finished_at = statement_timestamp(), call_lease_until = NULL,
    delivered_at = CASE WHEN c.attempt = 0 THEN c.taken_at ELSE m.delivered_at END,
    lateness_ms = CASE WHEN c.attempt = 0 THEN c.lateness_ms ELSE m.lateness_ms END,
    throttled_ms = CASE WHEN c.attempt = 0 AND c.throttled_ms > 0 THEN c.throttled_ms ELSE m.throttled_ms END,
    delivered_by = CASE WHEN c.attempt = 0 THEN %s ELSE m.delivered_by END
FROM unnest(%s::uuid[], %s::int[], %s::timestamptz[], %s::timestamptz[], %s::bigint[], %s::bigint[])
     AS c(id, attempt, lease, taken_at, lateness_ms, throttled_ms)
WHERE m.id = c.id AND m.call_lease_until = c.lease AND (m.status IN ({_IN_FLIGHT})) IS TRUE
  AND m.attempts = c.attempt
RETURNING m.id, m.endpoint_id, m.topology_id, m.delivered_at, m.lateness_ms, m.attempts, m.throttled_ms,
          (m.on_delivered_id IS NOT NULL AND m.notification IS NULL)
"""

_FAILED = f"""
UPDATE {MESSAGES} AS m
SET status = c.status, attempts = c.attempts, last_error = c.error, finished_at = c.finished_at,
    call_lease_until = NULL,
    delivered_at = CASE WHEN c.attempt = 0 THEN c.taken_at ELSE m.delivered_at END,
    lateness_ms = CASE WHEN c.attempt = 0 THEN c.lateness_ms ELSE m.lateness_ms END,
    delivered_by = CASE WHEN c.attempt = 0 THEN %s ELSE m.delivered_by END
FROM unnest(%s::uuid[], %s::int[], %s::timestamptz[], %s::timestamptz[], %s::bigint[], %s::text[], %s::int[],
            %s::text[], %s::timestamptz[])
     AS c(id, attempt, lease, taken_at, lateness_ms, status, attempts, error, finished_at)
WHERE m.id = c.id AND m.call_lease_until = c.lease AND (m.status IN ({_IN_FLIGHT})) IS TRUE
  AND m.attempts = c.attempt
RETURNING m.id
"""

_RELEASED = f"""
UPDATE {MESSAGES} AS m
SET call_lease_until = NULL, delivery_count = greatest(0, m.delivery_count - (c.attempt = 0)::int)
FROM unnest(%s::uuid[], %s::int[], %s::timestamptz[]) AS c(id, attempt, lease)
WHERE m.id = c.id AND m.call_lease_until = c.lease
"""

_ATTEMPTS = f"""
INSERT INTO {ATTEMPTS} (message_id, number, trigger, started_at, duration_ms, outcome, status_code, excerpt, worker)
SELECT a.id, a.number, a.trigger, a.started_at, a.duration_ms, a.outcome, a.status_code, a.excerpt, %s
FROM unnest(%s::uuid[], %s::int[], %s::text[], %s::timestamptz[], %s::int[], %s::text[], %s::int[], %s::text[])
     AS a(id, number, trigger, started_at, duration_ms, outcome, status_code, excerpt)
WHERE EXISTS (SELECT 1 FROM {MESSAGES} m WHERE m.id = a.id)
RETURNING 1
"""


def _error(result: CallResult) -> str:
    if result.outcome == AttemptOutcome.HTTP_STATUS:
        return f"webhook answered {result.status_code}"
    return f"webhook {AttemptOutcome(result.outcome).label}: {result.excerpt[:300]}"


def webhook_call_record(*, results: list[tuple[CallResult, Taken]], by: str = "") -> Recorded:
    """Record a batch of ended calls in one transaction: delivered, or the handler's retry or
    give-up (lifecycle.handler_failed, the wait at least what a Retry-After asked), each attempt
    kept, each endpoint's health, and endpoints failing past DELAY_WEBHOOK_DISABLE_AFTER disabled.
    A call handed back unattempted only gives its lease up."""
    settings = conf()
    now = timezone.now()
    outcomes: dict[str, Outcome] = {}
    called = [(r, t) for r, t in results if r.called]
    unattempted = [(r, t) for r, t in results if not r.called]
    with transaction.atomic():
        if unattempted:
            with connection.cursor() as cursor:
                cursor.execute(_RELEASED, [[t.message_id for _, t in unattempted], [t.attempt for _, t in unattempted],
                                           [t.lease_until for _, t in unattempted]])
            for _, t in unattempted:
                outcomes[t.message_id] = Outcome(Result.BUSY, attempt=t.attempt)
        delivered = _record_delivered([(r, t) for r, t in called if r.ok], by)
        failed_outcomes = _record_failed([(r, t) for r, t in called if not r.ok], by, settings, now)
        keyed = [t for _, t in results if t.ordering_key is not None]
        if keyed:  # their keys let go of them; the next of a key whose message ended is woken
            ordering_end(keys={(t.endpoint_id, t.ordering_key) for t in keyed}, ended=[t.message_id for t in keyed])
        for _, t in called:
            if t.message_id in delivered:
                outcomes[t.message_id] = Outcome(Result.DELIVERED)
            elif t.message_id in failed_outcomes:
                outcomes[t.message_id] = failed_outcomes[t.message_id]
            else:  # its lease passed and another call took it: that call's result stands
                outcomes[t.message_id] = Outcome(Result.DUPLICATE)
        _record_attempts(called, by)
        facts: list = []
        paused, disabled = _record_health(called, settings, now, facts)
        rows = list(delivered.values())
        _tell(delivered, failed_outcomes, facts)
        delivery_minute_record(messages=rows)
        metrics.record_on_commit([metrics.Counted(metrics.DELIVERIES, row, row.lateness_ms, row.throttled_ms)
                                  for row in rows if row.attempts == 0])
        webhook_metrics.calls_on_commit([(r.call.endpoint, t.topology_id, r) for r, t in called])
    delivery_log_on_commit(messages=rows, by=by)
    return Recorded(outcomes, paused, disabled)


@dataclass(frozen=True)
class _Delivered(_Row):
    throttled_ms: int | None = None
    callback: bool = False  # an on_delivered endpoint to tell (and no notification itself)


def _record_delivered(pairs, by: str) -> dict[str, _Delivered]:
    if not pairs:
        return {}
    lateness = [lifecycle.lateness_ms(t.due_at, t.taken_at, accepted_at=t.created_at) for _, t in pairs]
    rows = execute_prepared(_DELIVERED, [by, uuid_array(t.message_id for _, t in pairs),
                                         int_array(t.attempt for _, t in pairs), [t.lease_until for _, t in pairs],
                                         [t.taken_at for _, t in pairs], int_array(lateness),
                                         int_array(t.throttled_ms for _, t in pairs)])
    teams = {t.endpoint_id: t.team_id for _, t in pairs}
    return {str(r[0]): _Delivered(endpoint_id=r[1], topology_id=r[2], id=str(r[0]), delivered_at=r[3], lateness_ms=r[4],
                                  attempts=r[5], throttled_ms=r[6], endpoint_team_id=teams.get(r[1]), callback=r[7])
            for r in rows}


def _record_failed(pairs, by: str, settings, now: datetime) -> dict[str, Outcome]:
    if not pairs:
        return {}
    columns = defaultdict(list)
    decided: dict[str, Outcome] = {}
    for result, t in pairs:
        error = _error(result)
        state = lifecycle.State(status=Status.DELIVERED, due_at=t.due_at, attempts=t.attempt, expires_at=t.expires_at)
        wait_s = backoff.exponential(t.attempt + 1, first=settings.handler_backoff_seconds)
        asked = pushback.retry_after_seconds(result.retry_after, now=now,
                                             longest=settings.webhook_retry_after_max_seconds)
        retry_in = max(wait_s, asked or 0)
        event, change = lifecycle.handler_failed(state, error=error, max_retries=settings.handler_max_retries, now=now,
                                                 retry_at=now + timedelta(seconds=retry_in))
        if event is lifecycle.Event.GIVE_UP:
            decided[t.message_id] = Outcome(Result.FAILED)
        elif event is lifecycle.Event.EXPIRE:  # its retry would come after its expires_at: never retried
            decided[t.message_id] = Outcome(Result.EXPIRED)
        else:
            decided[t.message_id] = Outcome(Result.RETRY, attempt=change["attempts"], retry_in=retry_in)
        for name, value in (("id", t.message_id), ("attempt", t.attempt), ("lease", t.lease_until),
                            ("taken_at", t.taken_at),
                            ("lateness", lifecycle.lateness_ms(t.due_at, t.taken_at, accepted_at=t.created_at)),
                            ("status", str(change["status"])), ("attempts", change["attempts"]),
                            ("error", change["last_error"]), ("finished_at", change["finished_at"])):
            columns[name].append(value)
    columns["id"] = uuid_array(columns["id"])
    recorded = {str(r[0]) for r in execute_prepared(_FAILED, [by, *(columns[n] for n in (
        "id", "attempt", "lease", "taken_at", "lateness", "status", "attempts", "error", "finished_at"))])}
    counted = []
    for result, t in pairs:
        if t.message_id in recorded:
            row = _Row(t.endpoint_id, t.topology_id)
            counted += metrics.handler_failed(row, retried=decided[t.message_id].result is Result.RETRY)
            if decided[t.message_id].result is Result.EXPIRED:
                counted.append(metrics.Counted(metrics.EXPIRED, row))
            if t.attempt == 0:  # the first hand-over is the delivery, whatever its handler's outcome
                counted.append(metrics.Counted(metrics.DELIVERIES, row,
                                               lifecycle.lateness_ms(t.due_at, t.taken_at, accepted_at=t.created_at),
                                               t.throttled_ms))
            if decided[t.message_id].result is Result.FAILED:
                log.error("message %s failed after %d attempts: %s", t.message_id, t.attempt + 1, _error(result),
                          extra={"traceparent": result.call.headers.get("traceparent")})  # its trace ids
    metrics.record_on_commit(counted)
    return {message_id: outcome for message_id, outcome in decided.items() if message_id in recorded}


def _record_attempts(called, by: str) -> None:
    if not called:
        return
    excerpt_bytes = conf().webhook_excerpt_bytes
    execute_prepared(_ATTEMPTS, [
            by[:255], uuid_array(t.message_id for _, t in called), int_array(t.attempt + 1 for _, t in called),
            [str(Trigger.RETRY if t.attempt else (t.trigger or Trigger.SCHEDULED)) for _, t in called],
            [from_epoch_ms(int(r.started_at * 1000)) for r, _ in called], [r.duration_ms for r, _ in called],
            [str(r.outcome) for r, _ in called], [r.status_code for r, _ in called],
            [nul_replaced(r.excerpt.encode()[:excerpt_bytes].decode("utf-8", "ignore")) for r, _ in called]])


def _tell(delivered: dict, failed: dict[str, Outcome], facts: list) -> None:
    """What the notifications tell of this batch, in its transaction (notifications/services.py):
    each statement only when there is something to tell."""
    callbacks = [message_id for message_id, row in delivered.items() if row.callback]
    gave_up = [message_id for message_id, o in failed.items() if o.result is Result.FAILED]
    expired = [message_id for message_id, o in failed.items() if o.result is Result.EXPIRED]  # the retry too late
    failing = [message_id for message_id, o in failed.items()
               if o.result is Result.RETRY and notification_attempt_failing(attempts=o.attempt)]
    notification_emit_ended(delivered=callbacks, failed=gave_up, failing=failing, expired=expired)
    notification_emit(facts=facts)


def _record_health(called, settings, now: datetime, facts: list) -> tuple[dict[int, datetime], list[int]]:
    """Fold each endpoint's results, in the order they ended, into its EndpointHealth; written only
    where something changes (a healthy endpoint's successes write nothing). ``facts``: the endpoint
    facts the notifications tell (a circuit opened, an endpoint disabled) are added to it."""
    by_endpoint: dict[int, list[CallResult]] = defaultdict(list)
    for result, t in sorted(called, key=lambda pair: pair[0].started_at + pair[0].duration_ms / 1000):
        by_endpoint[t.endpoint_id].append(result)
    existing = set(Endpoint.objects.filter(id__in=by_endpoint).values_list("id", flat=True))  # one deleted meanwhile: none
    kept = {h.endpoint_id: h for h in EndpointHealth.objects.select_for_update().filter(endpoint_id__in=existing)}
    paused, disabled = {}, []
    for endpoint_id, ended in by_endpoint.items():
        if endpoint_id not in existing:
            continue
        row = kept.get(endpoint_id)
        health = pushback.Health(row.consecutive_failures, row.failing_since, row.paused_until,
                                 row.circuit_opened) if row else pushback.Health()
        if row is None and all(r.ok for r in ended):
            continue
        change: dict = {}
        for result in ended:
            if result.ok:
                change = pushback.after_success(now=now)
            else:
                asked = pushback.retry_after_seconds(result.retry_after, now=now,
                                                     longest=settings.webhook_retry_after_max_seconds)
                change = pushback.after_failure(health, now=now, error=_error(result), retry_after_s=asked,
                                                circuit_failures=settings.webhook_circuit_failures,
                                                circuit_seconds=settings.webhook_circuit_seconds)
            health = pushback.Health(change["consecutive_failures"], change["failing_since"],
                                     change["paused_until"], change["circuit_opened"])
        if row is not None and all(getattr(row, k) == v for k, v in change.items() if k != "last_success_at"):
            continue  # nothing that matters changed (a success on a healthy endpoint)
        EndpointHealth.objects.update_or_create(endpoint_id=endpoint_id, defaults=change)
        if health.paused_until is not None and health.paused_until > now:
            paused[endpoint_id] = health.paused_until
            if health.circuit_opened > (row.circuit_opened if row else 0):
                webhook_metrics.circuit_opened(endpoint_id)
                facts.append(notification_endpoint_fact(type=NotificationType.ENDPOINT_CIRCUIT_OPENED,
                                           endpoint=Endpoint.objects.select_related("team").get(id=endpoint_id),
                                           health=health))
                log.warning("endpoint %s: circuit open after %d failed calls in a row; calls paused until %s",
                            endpoint_id, health.consecutive_failures, health.paused_until.isoformat())
        if pushback.should_disable(health, now=now, disable_after=settings.webhook_disable_after):
            if endpoint := endpoint_disable_failing(endpoint_id=endpoint_id, health=health, now=now):
                disabled.append(endpoint_id)
                facts.append(notification_endpoint_fact(type=NotificationType.ENDPOINT_DISABLED, endpoint=endpoint,
                                                        health=health))
    return paused, disabled


def endpoint_disable_failing(*, endpoint_id: int, health: pushback.Health, now: datetime) -> Endpoint | None:
    """Disable an endpoint that has failed since ``health.failing_since``: no more calls, its
    messages kept in its queue (the loops stop consuming it) until someone enables it. Returns it
    (None: already disabled, or gone)."""
    endpoint = Endpoint.objects.select_for_update().filter(id=endpoint_id, is_active=True).first()
    if endpoint is None:
        return None
    since = health.failing_since
    reason = (f"disabled by the platform: every call failed since {since:%Y-%m-%d %H:%M} UTC "
              f"({health.consecutive_failures} in a row); its messages are kept; enable it to resume")
    endpoint.is_active, endpoint.disabled_at, endpoint.disabled_reason = False, now, reason
    endpoint.save(update_fields=["is_active", "disabled_at", "disabled_reason", "updated_at"])
    with audited(AuditContext(source="platform")):
        audit_record(action=actions.ENDPOINT_DISABLE, obj=endpoint, team=endpoint.team, before={"is_active": True},
                     after={"is_active": False, "disabled_reason": reason})
    webhook_metrics.endpoint_disabled(endpoint_id)
    log.error("endpoint %s/%s %s", endpoint.team.name, endpoint.name, reason)
    return endpoint

"""Ordering keys' turns (issue 49; the rules: core/ordering.py): messages of one endpoint with the
same ``ordering_key`` are handed over one at a time, in due order, each once the one before it ended.

The turn is decided where a copy is handed over, under a lock on the key's row of OrderingTurn (one
row per endpoint and key: no global lock). A copy that comes before its turn is acked and its row set
``waiting``; whatever ends a message of the key (its delivery, its last failure, a cancel) wakes the
next one (``waiting`` -> ``pending``, published after the commit by the relay), and a sweep (beat,
every SWEEP_SECONDS) wakes what a lost wake or a lapsed holder left waiting.

Locks are always taken in one order: message rows, then turn rows (sorted by endpoint and key, in one
statement), then successor rows with SKIP LOCKED, so nothing waits for a message row while holding a
turn. What is decided is read in a statement *after* the turn lock: under READ COMMITTED it sees the
commit of whoever held the turn before (an ender or a newcomer), which closes the lost wake-up.

Messages without a key never get here: no statement on their path.

Celery tasks: celery_task endpoints' keyed tasks hold the key from their hand-over, celery_queue
endpoints' from their claim (celery/turns.py); their end is reported by the worker's task_postrun
(celery/claim.py), by a team's worker through ``POST /api/messages/<id>/ended/`` (ordering_task_ended, live_only),
or, failing that, ends with a 15-minute lease. A holder is written for webhook calls and Celery tasks
(record-only messages end in the transaction that hands them over). DELAY_ORDERING_KEYS off refuses
callers' keys and schedules' overlap skip/buffer_one at the edges (messages/inputs.py,
schedules/services.py) while a rolling upgrade runs workers that ignore keys; this module never reads it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from scheduling.core.lifecycle import ORDER_OPEN_VALUES, Status, sql_list
from scheduling.core.ordering import Holder, Overlap, Turn, skip_reason, turn
from scheduling.db.sql import uuid_array
from scheduling.models import OrderingTurn, ScheduledMessage
from scheduling.observability import metrics

log = logging.getLogger(__name__)

SWEEP_SECONDS = 5.0  # beat: wake what a lost wake or a lapsed holder left waiting
# A Celery task handed over in its key's turn holds the key until its worker reports its end
# (task_postrun: celery/claim.py), or at the latest this long after it was sent (a worker without the
# platform's code, a crash with early acks: the sweep then lets the key go).
TASK_LEASE_SECONDS = 900
SWEEP_KEYS = 1000  # keys looked at per sweep
SWEEP_CURSOR = "dp:ordering-sweep:after"  # the last waiting key a sweep looked at: the next starts after it
MESSAGES = ScheduledMessage._meta.db_table
TURNS = OrderingTurn._meta.db_table
_OPEN = sql_list(ORDER_OPEN_VALUES)  # literals: the partial index message_ordering

# statement 1: lock the keys' turn rows (made on first use), in one order; a holder whose message ended
# (listed) or whose lease passed is let go. Returns each key's holder.
_LOCK = f"""
INSERT INTO {TURNS} AS t (endpoint_id, key, updated_at)
SELECT k.e, k.key, statement_timestamp() FROM unnest(%s::bigint[], %s::text[]) AS k(e, key) ORDER BY 1, 2
ON CONFLICT (endpoint_id, key) DO UPDATE SET updated_at = excluded.updated_at,
    holder_id = CASE WHEN t.holder_id = ANY(%s::uuid[]) OR t.holder_until <= statement_timestamp() THEN NULL
                     ELSE t.holder_id END,
    holder_until = CASE WHEN t.holder_id = ANY(%s::uuid[]) OR t.holder_until <= statement_timestamp() THEN NULL
                        ELSE t.holder_until END
RETURNING t.endpoint_id, t.key, t.holder_id, t.holder_until
"""

# statement 2 (after the lock): for each candidate, the first message of its key due before it that is
# still open (NULL: none), the batch's candidates left out (the caller walks those in order); and for a
# schedule's run under buffer_one, whether another message of the key already waits. One b-tree probe
# per key of the batch, not per candidate (the first open message of the key outside the batch is
# each candidate's answer if it comes before it, else none comes before it): each probe walks the
# index entries the key's ended messages left since the last vacuum (bench/explain_ordering.py), so
# a batch of one deep key's copies pays that walk once (f is MATERIALIZED: inlined, the planner ran
# the probe once per candidate again). buffer_one's probe (message_waiting) only for keys with such a
# candidate (IS NOT DISTINCT FROM: a NULL overlap AND EXISTS evaluated the EXISTS).
_EARLIER = f"""
WITH c AS (
    SELECT * FROM unnest(%s::uuid[], %s::bigint[], %s::text[], %s::timestamptz[], %s::timestamptz[], %s::text[])
        AS c(id, e, key, due_at, created_at, overlap)),
f AS MATERIALIZED (
    SELECT k.e, k.key, first.id, first.due_at, first.created_at, k.buffer_one AND EXISTS (
        SELECT 1 FROM {MESSAGES} p
        WHERE p.endpoint_id = k.e AND p.ordering_key = k.key AND p.status = '{Status.WAITING.value}'
          AND p.id <> ALL(%s::uuid[])) AS buffered
    FROM (SELECT e, key, bool_or(overlap IS NOT DISTINCT FROM '{Overlap.BUFFER_ONE.value}') AS buffer_one
          FROM c GROUP BY e, key) k
    LEFT JOIN LATERAL (
        SELECT p.id, p.due_at, p.created_at FROM {MESSAGES} p
        WHERE p.endpoint_id = k.e AND p.ordering_key = k.key AND p.status IN ({_OPEN}) AND p.id <> ALL(%s::uuid[])
        ORDER BY p.due_at, p.created_at, p.id LIMIT 1) first ON true)
SELECT c.id, CASE WHEN (f.due_at, f.created_at, f.id) < (c.due_at, c.created_at, c.id) THEN f.id END,
       c.overlap IS NOT DISTINCT FROM '{Overlap.BUFFER_ONE.value}' AND f.buffered
FROM c JOIN f ON f.e = c.e AND f.key = c.key
"""

# wake: the first open message of each key, if it is waiting (and no one else holds its row), is pending again
_WAKE = f"""
WITH heads AS (
    SELECT h.id FROM unnest(%s::bigint[], %s::text[]) AS k(e, key)
    CROSS JOIN LATERAL (
        SELECT p.id, p.status FROM {MESSAGES} p
        WHERE p.endpoint_id = k.e AND p.ordering_key = k.key AND p.status IN ({_OPEN})
        ORDER BY p.due_at, p.created_at, p.id LIMIT 1) h
    WHERE h.status = '{Status.WAITING.value}'),
locked AS (
    SELECT m.id FROM {MESSAGES} m WHERE m.id IN (SELECT id FROM heads) AND m.status = '{Status.WAITING.value}'
    FOR UPDATE SKIP LOCKED)
UPDATE {MESSAGES} AS m SET status = '{Status.PENDING.value}', published_at = NULL
FROM locked WHERE m.id = locked.id
RETURNING m.id
"""


@dataclass(frozen=True)
class Decision:
    """A keyed copy's turn: GO, WAIT or SKIP (a schedule's run, by its overlap policy: ``reason``)."""

    turn: Turn
    reason: str | None = None


def _lock(keys, *, ended=()) -> dict[tuple[int, str], Holder]:
    keys = sorted(set(keys))
    ended = uuid_array(ended)
    with connection.cursor() as cursor:
        cursor.execute(_LOCK, [[e for e, _ in keys], [k for _, k in keys], ended, ended])
        return {(e, k): Holder(str(h) if h else None, until) for e, k, h, until in cursor.fetchall()}


def _earlier_params(candidates) -> list:
    """_EARLIER's parameters for these candidates (bench/explain_ordering.py explains it with them)."""
    ids = uuid_array(m.id for m in candidates)
    return [ids, [m.endpoint_id for m in candidates], [m.ordering_key for m in candidates],
            [m.due_at for m in candidates], [m.created_at for m in candidates],
            [getattr(m, "overlap", None) for m in candidates], ids, ids]


def ordering_take(*, candidates: list, now: datetime, chain) -> dict[str, Decision]:
    """Decide the turn of keyed messages whose copies are to be handed over now (rows locked by the
    caller, in its transaction; each with id, endpoint_id, ordering_key, due_at, created_at, overlap).
    Each key's candidates are walked in due order: the first goes if no other message holds the key and
    none due before it is open; with ``chain`` (a bool, or a function of a candidate: the handover
    itself ends the message, no handler) the next ones of the key go after it, else they wait, or for
    a schedule's run are skipped by its overlap policy (core/ordering.turn). The turn rows stay locked
    until the caller commits. Returns id -> Decision (GO, WAIT or SKIP, and for SKIP the reason)."""
    if not candidates:
        return {}
    holders = _lock((m.endpoint_id, m.ordering_key) for m in candidates)
    with connection.cursor() as cursor:
        cursor.execute(_EARLIER, _earlier_params(candidates))
        earlier = {str(i): (str(first) if first else None, bool(buffered)) for i, first, buffered in cursor.fetchall()}
    per_key = defaultdict(list)
    for m in candidates:
        per_key[m.endpoint_id, m.ordering_key].append(m)
    decided: dict[str, Decision] = {}
    for key, rows in per_key.items():
        blocked_by = waits = None  # the batch's own: the first of the key that did not go, one that waits
        for m in sorted(rows, key=lambda r: (r.due_at, r.created_at, str(r.id))):
            first, buffered = earlier[str(m.id)]
            overlap = getattr(m, "overlap", None)
            holder = holders[key]
            answer = turn(mine=str(m.id), holder=holder, earlier_open=bool(first or blocked_by), now=now,
                          overlap=overlap, buffered=buffered or waits is not None)
            reason = None
            if answer is Turn.SKIP:
                running = holder.message_id if holder.live(now) and holder.message_id != str(m.id) \
                    else first or blocked_by
                reason = skip_reason(overlap=overlap, running=running, buffered=buffered or waits is not None)
            decided[str(m.id)] = Decision(answer, reason)
            if answer is Turn.WAIT and waits is None:
                waits = str(m.id)
            if blocked_by is None and (answer is not Turn.GO or not (chain(m) if callable(chain) else chain)):
                blocked_by = str(m.id) if answer is not Turn.SKIP else None
    return decided


def ordering_hold(*, held: list[tuple[int, str, str, datetime]]) -> None:
    """Record (endpoint, key, message id, until) as the key's holder: its webhook call is out until
    then (turn rows locked by ordering_take in this transaction). A successor never overlaps the
    call, even once the holder was cancelled."""
    if not held:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TURNS} AS t SET holder_id = h.id, holder_until = h.until "
            f"FROM unnest(%s::bigint[], %s::text[], %s::uuid[], %s::timestamptz[]) AS h(e, key, id, until) "
            f"WHERE t.endpoint_id = h.e AND t.key = h.key AND (t.holder_id IS NULL OR t.holder_id = h.id)",
            [[h[0] for h in held], [h[1] for h in held], uuid_array(h[2] for h in held), [h[3] for h in held]])


def ordering_end(*, keys, ended=()) -> list[str]:
    """Messages of these (endpoint, key) pairs ended (``ended``: their ids, let go as holders): wake
    the next of each key, in the caller's transaction (after its message rows are written); the
    relay publishes the woken after the commit. Returns the ids woken."""
    keys = set(keys)
    if not keys:
        return []
    holders = _lock(keys, ended=ended)
    now = timezone.now()
    free = sorted(key for key, holder in holders.items() if not holder.live(now))
    if not free:
        return []
    with connection.cursor() as cursor:
        cursor.execute(_WAKE, [[e for e, _ in free], [k for _, k in free]])
        woken = [str(row[0]) for row in cursor.fetchall()]
    if woken:
        metrics.ordering_woken_on_commit(len(woken))
        transaction.on_commit(lambda: _publish(woken))
    return woken


class Release:
    """What a task's end did to its key's turn (``POST /api/messages/<id>/ended/`` answers it)."""

    ENDED = "ended"  # it held the key: let go, the next of the key woken
    KEPT = "kept"  # it held the key and retries: held for another lease
    NONE = "none"  # no key, or the key is not its own (ended already, lease lapsed): nothing changed


@dataclass(frozen=True)
class TaskEnded:
    release: str  # a Release value
    woken: list[str]  # the ids of the key's next messages woken


def ordering_task_ended(*, message_id: str, retrying: bool = False, live_only: bool = False) -> TaskEnded:
    """The Celery task of an ordered message ended: let its key go and wake the next (its own
    transaction); a task retrying keeps the key for another lease, only while it still holds it (a
    lapsed hold is not taken back). ``live_only``, for a worker of another codebase reporting through
    the API: nothing changes unless the message holds its key's turn with its hold live, so that a
    report for any other message (unkeyed, waiting, ended long ago, repeated) changes nothing; the
    platform's own workers end a lapsed hold too (task_postrun, celery/claim.py)."""
    row = ScheduledMessage.objects.filter(id=message_id).values_list("endpoint_id", "ordering_key").first()
    if row is None or row[1] is None:
        return TaskEnded(Release.NONE, [])
    with transaction.atomic():
        now = timezone.now()
        holder = _lock([row])[row]
        holds = holder.message_id == message_id
        if live_only and not (holds and holder.live(now)):
            return TaskEnded(Release.NONE, [])
        if retrying:
            if not holds:
                return TaskEnded(Release.NONE, [])
            ordering_hold(held=[(row[0], row[1], message_id, now + timedelta(seconds=TASK_LEASE_SECONDS))])
            return TaskEnded(Release.KEPT, [])
        woken = ordering_end(keys=[row], ended=[message_id])
        return TaskEnded(Release.ENDED if holds else Release.NONE, woken)


_WAITING_KEYS = f"""
SELECT DISTINCT endpoint_id, ordering_key FROM {MESSAGES}
WHERE status = '{Status.WAITING.value}' AND waiting_since < statement_timestamp() - make_interval(secs => %s)
  AND (endpoint_id, ordering_key) > (%s, %s) AND (%s::bigint IS NULL OR (endpoint_id, ordering_key) <= (%s, %s))
ORDER BY 1, 2 LIMIT %s
"""


def _sweep_keys(*, limit: int, older_than_s: float) -> list[tuple[int, str]]:
    """Up to ``limit`` keys with a message waiting longer than ``older_than_s``, in (endpoint, key)
    order from just after the cursor the previous sweep left (kept in the shared cache table that every
    worker sees), wrapping round to the first keys. A key whose messages wait behind a live head
    (a backlog: waiting legitimately) would otherwise fill every sweep's ``limit`` and a lost wake on
    a key past them would never be repaired. The cursor lost (a cache cleared) restarts at the first."""
    after = _sweep_cache().get(SWEEP_CURSOR) or (-1, "")
    with connection.cursor() as cursor:
        cursor.execute(_WAITING_KEYS, [older_than_s, after[0], after[1], None, None, None, limit])
        keys = [(e, k) for e, k in cursor.fetchall()]
        if len(keys) < limit and after != (-1, ""):  # the end reached: go round from the first key to it
            cursor.execute(_WAITING_KEYS, [older_than_s, -1, "", after[0], after[0], after[1], limit - len(keys)])
            keys += [(e, k) for e, k in cursor.fetchall()]
    _sweep_cache().set(SWEEP_CURSOR, keys[-1] if len(keys) == limit else None, None)
    return keys


def _sweep_cache():
    from django.core.cache import caches

    return caches["throttle"]  # a table of the platform's database: one cursor for every worker


def _publish(ids: list[str]) -> None:
    from scheduling.messages.relay import relay_publish  # the relay imports the delivery path's neighbours

    relay_publish(ids=ids)  # what it misses stays pending: the relay's sweep publishes it


def ordering_sweep(*, limit: int = SWEEP_KEYS, older_than_s: float = SWEEP_SECONDS) -> int:
    """Wake what a lost wake left waiting (a publish after commit lost, an ending path that does not
    wake) and let go of holders whose lease passed (a worker died mid-call): keys with a message
    waiting for ``older_than_s`` (a wake normally follows within milliseconds: the others are not
    touched, so a busy key's turn is not locked for nothing) or a lapsed holder. At most ``limit``
    waiting keys a sweep, taken after the last key the previous sweep looked at (``_sweep_keys``):
    with more keys backlogged than that, each is looked at in turn. Returns how many messages it woke."""
    keys = _sweep_keys(limit=limit, older_than_s=older_than_s)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT endpoint_id, key FROM {TURNS} WHERE holder_id IS NOT NULL "
                       f"AND holder_until <= statement_timestamp() LIMIT %s", [limit])
        keys = sorted(set(keys) | {(e, k) for e, k in cursor.fetchall()})
    woken = 0
    for start in range(0, len(keys), 100):  # short transactions: a hot key's turn is not held long
        with transaction.atomic():
            woken += len(ordering_end(keys=keys[start:start + 100]))
    if woken:
        log.info("ordering sweep: woke %d message(s)", woken)
    return woken

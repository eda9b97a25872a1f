"""Copies that name no row: set aside for the operator (OrphanCopy), never delivered blind nor
dropped silently.

PostgreSQL is the record of every message; the broker holds copies. A copy whose row is missing
is one the database no longer knows: after PostgreSQL is restored to an earlier time (backup time
B), every message scheduled after B still has its copy in the cascade and none in the database
(docs/operations/backup-and-restore.md). Delivering it would run a handler with no payload (a
webhook's body lived in the row) and no record; dropping it would lose a message a user was
promised. So each is kept with what it carried -- id, queue, the endpoint and team of that queue,
due time, headers, body -- counted (``delay_orphan_copies_total``), logged once a batch, and
listed for the operator (the admin's "Orphan copies", ``reconcile_after_restore --export-orphans``),
who decides: schedule it again through the API, or let it go.

The delivery loop calls this before it acks such a copy (nothing is acked before it is written);
so do the ``scheduling.deliver`` fallback task and the Celery claim of a task with no row.

Bounded, as a team's broker user can publish copies with made-up ids into its own queues: a queue
keeps at most DELAY_ORPHAN_COPIES_MAX_PER_QUEUE rows (a new copy beyond it is acked without one,
counted in ``delay_orphan_copies_dropped_total``, one warning a batch; a copy already kept still
counts in ``times_seen``), checked under a lock per queue so that two workers cannot both take the
last room; and the prune (retention/table_prunes.py) deletes, in batches, the copies not seen for
DELAY_ORPHAN_COPY_RETENTION. An operator deletes the ones decided on in the admin, audited.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from scheduling.audit import actions
from scheduling.audit.services import audit_record, audit_values
from scheduling.config.conf import conf, setting_name
from scheduling.core.clock import from_epoch_ms
from scheduling.core.text import nul_replaced
from scheduling.messages import wire
from scheduling.models import Endpoint, OrphanCopy
from scheduling.observability import metrics

log = logging.getLogger(__name__)

BODY_CAP_BYTES = 64 * 1024  # a copy's body is kept up to this (a task's arguments; a deliver message is ~100 B)
# pg_advisory_xact_lock(QUEUE_LOCK, hashtext(queue)): the two-key space, apart from the prune's one-key lock
QUEUE_LOCK = int.from_bytes(b"dpoc", "big") & (2**31 - 1)
# what an operator's delete records of each copy (not its headers and body: up to 64 KiB each)
AUDITED = ("message_id", "attempt", "queue", "endpoint", "team", "due_at", "task", "first_seen_at", "last_seen_at",
           "times_seen")


@dataclass(frozen=True)
class Carried:
    """What one copy with no row carried, as the worker read it off the wire."""

    message_id: str
    attempt: int
    queue: str
    due_ms: int | None = None
    headers: dict = field(default_factory=dict)
    body: object = b""  # bytes or text as carried; anything else is kept as its JSON


def orphan_copy_carried_by_task(*, request, message_id: str, attempt: int, task: str, args, kwargs,
                           task_id: str | None = None) -> Carried:
    """What a Celery task with no row carried (the claim's hook and the ``scheduling.deliver``
    fallback): its platform headers (Celery keeps them on the request), its name (and id, when
    given), the queue its routing key names, and its arguments as the body."""
    headers = {k: v for k, v in vars(request).items() if k.startswith("x-dp-")} | {"task": task}
    if task_id is not None:
        headers["id"] = task_id
    queue = wire.queue_of_routing_key(str((request.delivery_info or {}).get("routing_key") or ""))
    return Carried(message_id, attempt, queue, headers=headers, body=[args, kwargs])


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _json_safe(headers: dict) -> dict:
    """AMQP headers as JSON (timestamps, bytes, decimals as text)."""
    return json.loads(json.dumps(headers or {}, default=str))


def _text(body) -> str:
    """The body as text, capped: bytes as UTF-8 (what cannot be decoded replaced), anything else as
    JSON (a task's ``[args, kwargs]``, only encoded when the copy is set aside)."""
    if isinstance(body, bytes):
        raw = body
    elif isinstance(body, str):
        raw = body.encode()
    else:
        raw = json.dumps(body, default=str).encode()
    text = nul_replaced(raw[:BODY_CAP_BYTES].decode("utf-8", errors="replace"), by="\ufffd")
    return text + (f"... ({len(raw):,} bytes, capped)" if len(raw) > BODY_CAP_BYTES else "")


_INSERT = """
    INSERT INTO {table} AS t (message_id, attempt, queue, endpoint_id, team_id, due_at, published_at, version, task,
                              headers, body, first_seen_at, last_seen_at, times_seen, received_by)
    VALUES {values}
    ON CONFLICT (message_id, attempt, queue) DO UPDATE
        SET times_seen = t.times_seen + EXCLUDED.times_seen, last_seen_at = EXCLUDED.last_seen_at
    RETURNING (xmax = 0)
"""


def orphan_copy_set_aside(*, copies: list[Carried], by: str = "") -> int:
    """Keep each copy (one row per message id, attempt and queue; a copy seen again counts in
    ``times_seen``) in one statement, counted once committed; a new copy whose queue already
    keeps its bound is acked without a row, counted (see the module's doc). Returns how many rows
    are new."""
    if not copies:
        return 0
    now, bound = timezone.now(), conf().orphan_copies_max_per_queue
    seen = Counter(_key(c) for c in copies)
    first = {}
    for copy in copies:
        first.setdefault(_key(copy), copy)
    owners = {queue: (endpoint_id, team_id) for queue, endpoint_id, team_id in
              Endpoint.objects.filter(queue__in={key[2] for key in first}).values_list("queue", "id", "team_id")}
    with transaction.atomic(), connection.cursor() as cursor:
        dropped = _beyond_bound(cursor, list(first), bound)
        kept = {key: copy for key, copy in first.items() if key not in dropped}
        new = _insert(cursor, kept, seen, owners, now, by) if kept else 0
        kept_queues = [copy.queue for copy in copies if _key(copy) not in dropped]
        dropped_queues = [copy.queue for copy in copies if _key(copy) in dropped]
        transaction.on_commit(lambda: (metrics.orphaned(kept_queues), metrics.orphans_dropped(dropped_queues)))
    example = copies[0]
    bound = (f"; {len(dropped_queues)} acked without a row, their queue ({', '.join(sorted({k[2] for k in dropped}))}) "
             f"keeping its bound of {bound:,} orphan copies "
             f"({setting_name('orphan_copies_max_per_queue')}; counted in delay_orphan_copies_dropped_total)"
             if dropped else "")
    log.warning("%d cop%s naming no row set aside, not delivered (%d new; e.g. %s on %s)%s: restored from a "
                "backup? See the orphan copies (admin, reconcile_after_restore --export-orphans)",
                len(kept_queues), "y" if len(kept_queues) == 1 else "ies", new, example.message_id, example.queue,
                bound)
    return new


def _key(copy: Carried) -> tuple[str, int, str]:
    """A copy's row: message id, attempt and queue, cut to the columns' lengths."""
    return copy.message_id[:64], copy.attempt, copy.queue[:255]


def _beyond_bound(cursor, keys: list[tuple], bound: int) -> set[tuple]:
    """The keys (message id, attempt, queue) of new copies their queue has no room for. Each queue
    is counted (at most ``bound`` index entries of the queue index) under a lock of its own, held to
    the end of the transaction, taken in queue order (no two set-asides wait on each other in a
    circle): a second worker counts once the first has committed. Copies already kept are never
    beyond the bound (they only count in ``times_seen``)."""
    table, beyond = OrphanCopy._meta.db_table, set()
    by_queue: dict[str, list[tuple]] = {}
    for key in keys:
        by_queue.setdefault(key[2], []).append(key)
    for queue in sorted(by_queue):
        cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [QUEUE_LOCK, queue])
        cursor.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE queue = %s LIMIT %s) kept", [queue, bound])
        kept, batch = cursor.fetchone()[0], by_queue[queue]
        if kept + len(batch) <= bound:
            continue
        cursor.execute(f"SELECT message_id, attempt FROM {table} WHERE queue = %s AND message_id = ANY(%s)",
                       [queue, [key[0] for key in batch]])
        known = {(message_id, attempt, queue) for message_id, attempt in cursor.fetchall()}
        room = max(bound - kept, 0)
        for key in batch:
            if key in known:
                continue
            if room:
                room -= 1
            else:
                beyond.add(key)
    return beyond


def _insert(cursor, first: dict, seen: Counter, owners: dict, now, by: str) -> int:
    params, rows = [], []
    for key, copy in first.items():
        headers = copy.headers or {}
        due_ms = copy.due_ms if copy.due_ms is not None else _int(headers.get(wire.H_DUE_AT_MS))
        published_ms = _int(headers.get(wire.H_PUBLISHED_AT_MS))
        task = headers.get("task")
        rows.append("(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s)")
        params += [*key, *owners.get(key[2], (None, None)),
                   from_epoch_ms(due_ms) if due_ms is not None else None,
                   from_epoch_ms(published_ms) if published_ms is not None else None,
                   str(headers.get(wire.H_VERSION) or "")[:16], str(task or "")[:255],
                   json.dumps(_json_safe(headers)), _text(copy.body), now, now, seen[key], by[:255]]
    cursor.execute(_INSERT.format(table=OrphanCopy._meta.db_table, values=", ".join(rows)), params)
    return sum(1 for (inserted,) in cursor.fetchall() if inserted)


def orphan_copy_prune_batch(*, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` copies last seen before ``before`` (oldest first, on the last-seen
    index; rows another transaction holds are skipped), in one transaction of their own: how
    many went. The prune calls it until fewer than ``limit`` go."""
    table = OrphanCopy._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE last_seen_at < %s "
                       "ORDER BY last_seen_at LIMIT %s FOR UPDATE SKIP LOCKED)", [before, limit])
        return cursor.rowcount


def orphan_copy_delete(*, ids: list[int]) -> int:
    """An operator's decision: delete these copies, each one audited (``orphan_copy.delete``, with
    what it named, not what it carried) in the same transaction. How many went."""
    with transaction.atomic():
        doomed = list(OrphanCopy.objects.select_for_update(of=("self",)).select_related("team")
                      .filter(pk__in=ids).order_by("pk"))
        for copy in doomed:
            audit_record(action=actions.ORPHAN_COPY_DELETE, obj=copy, team=copy.team,
                         before=audit_values(obj=copy, fields=AUDITED))
        return OrphanCopy.objects.filter(pk__in=[copy.pk for copy in doomed]).delete()[0]

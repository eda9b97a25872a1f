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
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.utils import timezone

from scheduling.core.clock import from_epoch_ms
from scheduling.messages import wire
from scheduling.models import Endpoint, OrphanCopy
from scheduling.observability import metrics

log = logging.getLogger(__name__)

BODY_CAP_BYTES = 64 * 1024  # a copy's body is kept up to this (a task's arguments; a deliver message is ~100 B)


@dataclass(frozen=True)
class Carried:
    """What one copy with no row carried, as the worker read it off the wire."""

    message_id: str
    attempt: int
    queue: str
    due_ms: int | None = None
    headers: dict = field(default_factory=dict)
    body: object = b""  # bytes or text as carried; anything else is kept as its JSON


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
    text = raw[:BODY_CAP_BYTES].decode("utf-8", errors="replace").replace("\x00", "\ufffd")
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
    ``times_seen``) in one statement, counted once committed. Returns how many rows are new."""
    if not copies:
        return 0
    now = timezone.now()
    seen = Counter((c.message_id[:64], c.attempt, c.queue[:255]) for c in copies)
    first = {}
    for copy in copies:
        first.setdefault((copy.message_id[:64], copy.attempt, copy.queue[:255]), copy)
    owners = {queue: (endpoint_id, team_id) for queue, endpoint_id, team_id in
              Endpoint.objects.filter(queue__in={key[2] for key in first}).values_list("queue", "id", "team_id")}
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
    sql = _INSERT.format(table=OrphanCopy._meta.db_table, values=", ".join(rows))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        new = sum(1 for (inserted,) in cursor.fetchall() if inserted)
        queues = [copy.queue for copy in copies]
        transaction.on_commit(lambda: metrics.orphaned(queues))
    example = copies[0]
    log.warning("%d cop%s naming no row set aside, not delivered (%d new; e.g. %s on %s): restored from a "
                "backup? See the orphan copies (admin, reconcile_after_restore --export-orphans)",
                len(copies), "y" if len(copies) == 1 else "ies", new, example.message_id, example.queue)
    return new

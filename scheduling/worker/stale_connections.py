"""Before each task, drop a database connection that a lost database left behind.

Celery's Django fixup closes connections between tasks, but Django's ``close()`` does nothing
for a connection it marked closed inside a transaction, so a pool process can keep handing a
dead psycopg connection to every task ("the connection is closed") after the database is
back. A connection psycopg reports closed is dropped and Django's transaction flags reset, with a
warning that records what they were.
"""

import logging

from celery import signals
from django.db import connections

log = logging.getLogger(__name__)


def _stale(conn) -> bool:
    """Only a connection psycopg knows is dead: a live one inside a transaction is the caller's
    (a task run in-process by a test or a shell, within its transaction)."""
    raw = conn.connection
    return raw is not None and raw.closed


@signals.task_prerun.connect
def connections_drop_stale(sender=None, **_) -> None:
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return  # an eager task runs inside its caller's transaction (tests, shell)
    for conn in connections.all(initialized_only=True):
        if not _stale(conn):
            continue
        log.warning("dropping a stale database connection before a task (in_atomic_block=%s, "
                    "closed_in_transaction=%s, errors_occurred=%s)", conn.in_atomic_block,
                    conn.closed_in_transaction, conn.errors_occurred)
        raw, conn.connection = conn.connection, None
        conn.in_atomic_block = conn.closed_in_transaction = conn.needs_rollback = False
        conn.atomic_blocks, conn.savepoint_ids = [], []
        try:
            raw.close()
        except Exception:  # noqa: BLE001 - it is already broken; nothing to keep from it
            pass

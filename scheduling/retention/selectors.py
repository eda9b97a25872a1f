"""What retention reads: the rows past their retention, what is still in flight, and the
messages table's size per row and autovacuum state."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models.functions import Coalesce

from scheduling.core.lifecycle import FINISHED, IN_FLIGHT, Status
from scheduling.models import ScheduledMessage

# --- retention (retention/services.py) ---------------------------------------------------------

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

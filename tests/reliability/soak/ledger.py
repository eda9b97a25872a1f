"""Every message the soak scheduled, judged where it is now: in the table or in the archive.

The prune moves finished messages from PostgreSQL to Parquet while the soak runs, so neither
place alone can say whether a message was lost. Both are read in one snapshot (the archive's
listed files and the live rows in one REPEATABLE READ transaction: the prune lists a batch's
file and deletes its rows in one commit), and every id the API accepted is looked up in the
union. Files the archive does not list (left by a killed prune) are not read, as the platform's
own readers do not read them."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

COLUMNS = ["id", "status", "due_at", "delivered_at", "lateness_ms"]
TIMESTAMP = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([("id", pa.string()), ("status", pa.string()), ("due_at", TIMESTAMP),
                    ("delivered_at", TIMESTAMP), ("lateness_ms", pa.int64())])
FINISHED = ["delivered", "cancelled"]
UNFINISHED = ["pending", "published"]


class Ledger:
    """What the driver was told: the ids the API accepted, and how each cancel was answered
    (200: cancelled, so it must never be delivered; 409: it was delivered first, the race the
    share of cancels aims at; 404: already pruned). Thread-safe: the load threads write it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._chunks: list[pa.Array] = []
        self._cancelled: list[str] = []
        self.scheduled = 0
        self.cancel_answers: dict[str, int] = {}

    def accepted(self, ids: list[str]) -> None:
        chunk = pa.array(ids, pa.string())
        with self._lock:
            self._chunks.append(chunk)
            self.scheduled += len(ids)

    def cancel_answered(self, message_id: str, status_code: int | str) -> None:
        key = str(status_code)
        with self._lock:
            self.cancel_answers[key] = self.cancel_answers.get(key, 0) + 1
            if status_code == 200:
                self._cancelled.append(message_id)

    def ids(self) -> pa.Array:
        with self._lock:
            chunks = list(self._chunks)
        return pa.concat_arrays(chunks) if chunks else pa.array([], pa.string())

    def cancelled_ids(self) -> pa.Array:
        with self._lock:
            return pa.array(self._cancelled, pa.string())


def read_snapshot(conn, archive_dir: Path) -> tuple[pa.Table, int]:
    """(every message row, live and archived; how many archive files were read). ``conn``: a
    psycopg connection, not in a transaction."""
    conn.isolation_level, conn.read_only = psycopg.IsolationLevel.REPEATABLE_READ, True
    with conn.transaction():
        paths = [row[0] for row in conn.execute("SELECT path FROM scheduling_archivefile ORDER BY path")]
        rows = conn.execute("SELECT id::text, status, due_at, delivered_at, lateness_ms "
                            "FROM scheduling_scheduledmessage").fetchall()
    live = pa.Table.from_arrays([pa.array([r[i] for r in rows], SCHEMA.field(i).type) for i in range(len(COLUMNS))],
                                schema=SCHEMA)
    archived = [pq.read_table(archive_dir / path, columns=COLUMNS).cast(SCHEMA) for path in paths]
    return pa.concat_tables([with_place(live, False), *(with_place(t, True) for t in archived)]), len(paths)


def with_place(table: pa.Table, archived: bool) -> pa.Table:
    """The rows with a column saying where they were read: the archive or the table."""
    return table.append_column("archived", pa.array([archived] * table.num_rows, pa.bool_()))


@dataclass(frozen=True)
class Outcome:
    rows: int  # message rows in the table and the archive together
    archived: int  # of them, read from the archive
    delivered: int
    cancelled: int
    failed: int
    unfinished: int  # pending or published
    early: int  # delivered before due (delivered_at < due_at, or a negative lateness)
    missing: int  # accepted by the API, in neither the table nor the archive
    not_finished: int  # accepted, and neither delivered nor cancelled anywhere (lost, once settled)
    overdue: int  # accepted, and missing, failed, or still unfinished this long after due
    duplicates: int  # rows beyond one per id (a message in both places, or archived twice)
    unknown: int  # rows of ids the API never answered (a request the driver gave up on)
    delivered_after_cancel: int  # cancel answered 200, yet delivered
    window_lateness_ms: list  # lateness of the deliveries in the window asked for


def judge(snapshot: pa.Table, accepted: pa.Array, cancelled: pa.Array, *, overdue_before: datetime,
          window: tuple[datetime, datetime] | None = None) -> Outcome:
    """Count what happened to the ``accepted`` ids in ``snapshot`` (read_snapshot's table)."""
    ids, status = snapshot.column("id"), snapshot.column("status")
    delivered = pc.equal(status, "delivered")
    finished_ids = pc.filter(ids, pc.is_in(status, pa.array(FINISHED)))
    delivered_ids = pc.filter(ids, delivered)
    early = pc.and_(delivered, pc.or_kleene(pc.less(snapshot.column("delivered_at"), snapshot.column("due_at")),
                                            pc.less(snapshot.column("lateness_ms"), 0)))
    due_before = pc.less(snapshot.column("due_at"), pa.scalar(overdue_before, TIMESTAMP))
    stuck = pc.or_(pc.equal(status, "failed"), pc.and_(pc.is_in(status, pa.array(UNFINISHED)), due_before))
    stuck_ids = pc.filter(ids, stuck)
    present = pc.is_in(accepted, ids)
    lateness = []
    if window is not None:
        start, end = (pa.scalar(t, TIMESTAMP) for t in window)
        at = snapshot.column("delivered_at")
        in_window = pc.and_(delivered, pc.and_(pc.greater(at, start), pc.less_equal(at, end)))
        lateness = pc.filter(snapshot.column("lateness_ms"), in_window).to_pylist()
    count = lambda mask: int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)  # noqa: E731
    missing = len(accepted) - count(present)
    return Outcome(
        rows=snapshot.num_rows,
        archived=count(snapshot.column("archived")) if "archived" in snapshot.column_names else 0,
        delivered=count(delivered),
        cancelled=count(pc.equal(status, "cancelled")),
        failed=count(pc.equal(status, "failed")),
        unfinished=count(pc.is_in(status, pa.array(UNFINISHED))),
        early=count(pc.fill_null(early, False)),
        missing=missing,
        not_finished=len(accepted) - count(pc.is_in(accepted, finished_ids)),
        overdue=missing + count(pc.is_in(accepted, stuck_ids)),
        duplicates=snapshot.num_rows - pc.count_distinct(ids).as_py(),
        unknown=count(pc.invert(pc.is_in(ids, accepted))),
        delivered_after_cancel=count(pc.is_in(cancelled, delivered_ids)),
        window_lateness_ms=[v for v in lateness if v is not None],
    )

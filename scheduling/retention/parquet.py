"""Message rows from PostgreSQL to Parquet, for the archive and for the report's export (and the
audit log's rows, for its archive).

Rows arrive through ``COPY (SELECT ...) TO STDOUT`` and pyarrow parses that CSV stream block by
block, so memory stays flat however many rows a query has. A file is written beside its final
name, flushed to disk, read back and checked, then renamed into place (and the directory
flushed): whoever deletes rows after ``DurableFile.finish`` returned has them on disk.
"""

from __future__ import annotations

import io
import os
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from django.db import connection

from scheduling.config.conf import conf
from scheduling.retention import columns
from topology import cascade

CSV_BLOCK_BYTES = 4 << 20
COMPRESSION = "zstd"


class ArchiveWriteError(Exception):
    """A file could not be written, or did not read back as written; nothing was deleted."""


def where_of(queryset) -> tuple[str, list]:
    """The WHERE of a ScheduledMessage queryset that filters on the message's own columns, as SQL
    over columns.M: selectors say which rows, in the ORM, and this reads them in bulk."""
    query = queryset.query
    return query.where.as_sql(query.get_compiler(using=queryset.db), connection)


def message_batches(*, where: str, params, payloads: bool, attempts: bool = True) -> Iterator[pa.RecordBatch]:
    """Batches of columns.SCHEMA plus the ``due_date`` of each row, for the rows of ``where``
    (SQL over columns.M); ``attempts`` off: attempt_log null. Run inside a transaction (the
    caller's: a snapshot, locks): it sets the time zone locally."""
    kinds = {name: kind for name, (_, kind) in columns.COLUMNS.items()} | {columns.DAY_COLUMN: pa.date32()}
    shards = conf().shards
    sql = columns.select_sql(where=where, payloads=payloads, attempts=attempts)
    for batch in copy_batches(sql=sql, params=params, kinds=kinds):
        yield _with_shard(batch, shards)


def copy_batches(*, sql: str, params, kinds: dict[str, pa.DataType]) -> Iterator[pa.RecordBatch]:
    """The rows of ``sql`` (its columns typed by ``kinds``) streamed through COPY, batch by batch.
    Inside a transaction only: it sets the time zone locally."""
    convert = pa_csv.ConvertOptions(
        column_types=kinds,
        # FORCE_QUOTE below quotes every value, so only an unquoted empty field is NULL: an empty
        # string stays "" and a last_error that reads NULL stays text
        null_values=[""], strings_can_be_null=True, quoted_strings_can_be_null=False,
    )
    with connection.cursor() as cursor, connection.wrap_database_errors:
        cursor.execute("SET LOCAL TIME ZONE 'UTC'")
        copy_sql = f"COPY ({sql}) TO STDOUT (FORMAT csv, HEADER true, FORCE_QUOTE *)"
        with cursor.cursor.copy(copy_sql, params) as copy, _CopyStream(copy) as stream:
            reader = pa_csv.open_csv(
                stream,
                read_options=pa_csv.ReadOptions(block_size=CSV_BLOCK_BYTES),
                parse_options=pa_csv.ParseOptions(newlines_in_values=True),  # payloads, errors
                convert_options=convert,
            )
            yield from reader


def _with_shard(batch: pa.RecordBatch, shards: dict[str, int]) -> pa.RecordBatch:
    """Insert the derived shard column before due_date: 0 for versions of one shard (no per-row
    work), else the shard its id picks."""
    if not any(count > 1 for count in shards.values()):
        shard = pa.repeat(pa.scalar(0, pa.int32()), batch.num_rows)
    else:
        ids, versions = batch.column("id").to_pylist(), batch.column("version").to_pylist()
        shard = pa.array([cascade.shard_of(i, shards.get(v, 1)) for i, v in zip(ids, versions)], pa.int32())
    arrays = [*batch.columns[:-1], shard, batch.column(columns.DAY_COLUMN)]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA_WITH_DAY)


SCHEMA_WITH_DAY = columns.SCHEMA.append(pa.field(columns.DAY_COLUMN, pa.date32()))


def split_by_day(table: pa.Table | pa.RecordBatch, day_column: str = columns.DAY_COLUMN) -> dict:
    """{day: that day's rows without the day column (due_date)}, days in order."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    days = sorted(pc.unique(table.column(day_column)).to_pylist())
    return {day: table.filter(pc.equal(table.column(day_column), day)).drop_columns([day_column]) for day in days}


def without_day(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(batch.columns[:-1], schema=columns.SCHEMA)


def temp_name(final: Path) -> Path:
    """Beside the final file, under a name no reader lists (a leading dot, no .parquet suffix)."""
    return final.with_name(f".{final.name}.tmp")


class DurableFile:
    """A Parquet file that survives a crash once ``finish`` returns: written batch by batch under a
    temporary name (memory stays at a batch, whatever the payloads weigh), then flushed, read back
    (row count and every id), renamed into place, and its directory flushed. ``abort`` removes
    it. Raises ArchiveWriteError if anything fails or differs."""

    def __init__(self, final: Path, schema: pa.Schema = columns.SCHEMA):
        self.final, self.temp, self.schema = final, temp_name(final), schema
        self.rows, self._ids = 0, []
        try:
            _make_dirs(final.parent)
            self._writer = pq.ParquetWriter(self.temp, schema, compression=COMPRESSION)
        except (OSError, pa.ArrowException) as exc:
            raise ArchiveWriteError(f"cannot write {final}: {exc}") from None

    def write(self, table: pa.Table) -> None:
        try:
            self._writer.write_table(table)
        except (OSError, pa.ArrowException) as exc:
            self.abort()
            raise ArchiveWriteError(f"cannot write {self.final}: {exc}") from None
        self.rows += table.num_rows
        self._ids.append(table.column("id"))

    def finish(self) -> int:
        """Returns the file's size."""
        try:
            self._writer.close()
            _fsync_file(self.temp)
            self._check()
            os.rename(self.temp, self.final)
            _fsync_dir(self.final.parent)
            return self.final.stat().st_size
        except (OSError, pa.ArrowException) as exc:
            self.abort()
            raise ArchiveWriteError(f"cannot write {self.final}: {exc}") from None
        except ArchiveWriteError:
            self.abort()
            raise

    def abort(self) -> None:
        try:
            self._writer.close()
        except Exception:  # already closed, or the disk that failed: the file goes anyway
            pass
        self.temp.unlink(missing_ok=True)

    def _check(self) -> None:
        rows = pq.read_metadata(self.temp).num_rows
        if rows != self.rows:
            raise ArchiveWriteError(f"{self.temp} reads back {rows} rows, not {self.rows}")
        written = pa.chunked_array(self._ids, self.schema.field("id").type).combine_chunks()
        if not pq.read_table(self.temp, columns=["id"]).column("id").combine_chunks().equals(written):
            raise ArchiveWriteError(f"{self.temp} reads back other ids than were written")


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs(path: Path) -> None:
    """``path`` and whichever of its parents are missing, each new one flushed into its parent
    (``_audit/at_date=...`` may be two new levels)."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        _fsync_dir(directory.parent)


def _fsync_dir(path: Path) -> None:
    """A rename or a new entry is durable only once its directory is flushed."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _CopyStream(io.RawIOBase):
    """COPY's data messages (about one row each) as a byte stream for pyarrow. A thread drains
    the connection into a small bounded queue of ~1 MiB blocks, so PostgreSQL keeps sending
    while pyarrow parses and writes (~20% faster here than reading in turn), memory bounded."""

    BLOCK_BYTES = 1 << 20

    def __init__(self, copy):
        self._blocks: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=16)
        self._pending = b""
        self._done = False
        self._thread = threading.Thread(target=self._drain, args=(copy,), name="copy-reader", daemon=True)
        self._thread.start()

    def _drain(self, copy) -> None:
        try:
            parts, size = [], 0
            for chunk in copy:
                parts.append(chunk)
                size += len(chunk)
                if size >= self.BLOCK_BYTES:
                    self._blocks.put(b"".join(parts))
                    parts, size = [], 0
            self._blocks.put(b"".join(parts))
            self._blocks.put(None)
        except BaseException as exc:  # handed to the reading side, which raises it
            self._blocks.put(exc)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending and not self._done:
            block = self._blocks.get()
            if isinstance(block, BaseException):
                raise block
            if block is None:
                self._done = True
            else:
                self._pending = block
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def close(self) -> None:
        """Wait for the reader so the connection is free again (it has read to the end)."""
        super().close()
        while self._thread.is_alive():
            try:
                self._blocks.get(timeout=0.1)
            except queue.Empty:
                pass
        self._thread.join()

"""The prune's Parquet archive (DELAY_ARCHIVE_DIR), the messages' and the audit log's: a batch of
rows past their retention written to files, listed and deleted in one transaction; files killed
prunes left removed; days past DELAY_ARCHIVE_RETENTION deleted. services.py runs these in order.

Crash-safe and exact. Each batch is one transaction: its rows are locked, written to one file
per due date beside the file's final name (each message with its attempts), flushed, read back
(row count and ids), renamed into place, then listed in ArchiveFile and deleted, their attempts
with them, in the same commit. Killed before that commit, the
rows are still in the table and the file is not listed: the next prune removes such files
before it writes anything, so no message is lost and none is archived twice. The audit log's
rows go the same way (``_audit/`` in the archive, listed in AuditArchiveFile).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.db import connection, transaction
from django.db.models import Q
from uuid_utils.compat import uuid7

from scheduling.audit.selectors import audit_list_past_retention
from scheduling.config.conf import conf
from scheduling.core.lifecycle import Status
from scheduling.db.sql import PRUNE_BATCH
from scheduling.models import ArchiveFile, ScheduledMessage
from scheduling.models.audit import AUDIT_PRUNE_BATCH, AuditArchiveFile, AuditEvent
from scheduling.models.delivery import MessageAttempt
from scheduling.retention import audit_columns, columns, parquet
from scheduling.retention.selectors import message_list_past_retention

log = logging.getLogger(__name__)

FILE_PREFIX, FILE_SUFFIX = "part-", ".parquet"


class PruneError(Exception):
    """The prune stopped; what it committed before stays committed, the rest is untouched."""


@dataclass(frozen=True)
class Batch:
    rows: int
    files: list[ArchiveFile] | list[AuditArchiveFile]
    last: tuple[datetime, object]  # (created_at, id) of its last row, (at, id) for audit: where the next starts


def message_prune_batch(*, status: Status, cutoff: datetime, after, limit: int, archive: Path,
                        payloads: bool) -> Batch | None:
    """One transaction: lock up to ``limit`` rows past the cutoff (in created_at, id order, after
    ``after``), archive them, list the files and delete the rows; None when none are left.
    Rows another transaction holds are skipped (the next prune takes them)."""
    with transaction.atomic():
        candidates = message_list_past_retention(status=status, cutoff=cutoff)
        if after is not None:
            created, last_id = after
            candidates = candidates.filter(Q(created_at__gt=created) | Q(created_at=created, id__gt=last_id),
                                           created_at__gte=created)
        count, last = ScheduledMessage.objects.lock_prune_batch(candidates, limit=limit)
        if not count:
            return None
        files = archive_write(rows=count, archive=archive, payloads=payloads)
        _commit_or_unlink(files, archive, lambda: archive_commit(files=files, rows=count))
    return Batch(count, files, last)


def archive_write(*, rows: int, archive: Path, payloads: bool) -> list[ArchiveFile]:
    """The ``rows`` rows of the batch the caller locked, in durable files, one per due date,
    streamed; unsaved ArchiveFile rows describe them."""
    where = f'{columns.M}."id" IN (SELECT id FROM {PRUNE_BATCH})'
    written = _write_days(parquet.message_batches(where=where, params=[], payloads=payloads), rows=rows,
                          what="messages", archive=archive, partition=columns.partition_name)
    return [ArchiveFile(path=path, day=day, rows=count, bytes=size) for day, path, count, size in written]


def _write_days(batches, *, rows: int, what: str, archive: Path, partition: Callable,
                day_column: str = columns.DAY_COLUMN, schema=columns.SCHEMA) -> list[tuple]:
    """``batches`` (each row with its day last) in durable files, one per day under
    ``partition(day)``, all of one name; [(day, path relative to the archive, rows, bytes)].
    Checks that the ``rows`` rows of the batch came back; on any failure, removes what it wrote."""
    name = f"{FILE_PREFIX}{uuid7().hex}{FILE_SUFFIX}"  # time-ordered: a day's files list in the order written
    files: dict = {}  # day -> parquet.DurableFile
    try:
        for batch in batches:
            for day, part in parquet.split_by_day(batch, day_column).items():
                if day not in files:
                    files[day] = parquet.DurableFile(archive / partition(day) / name, schema)
                files[day].write(part)
        read = sum(f.rows for f in files.values())
        if read != rows:
            raise PruneError(f"read {read} of the {rows} locked {what} back; nothing was deleted")
        sizes = {day: durable.finish() for day, durable in files.items()}
    except (parquet.ArchiveWriteError, PruneError) as exc:
        for durable in files.values():
            durable.abort()
            durable.final.unlink(missing_ok=True)
        raise PruneError(str(exc)) from None
    return [(day, str(durable.final.relative_to(archive)), durable.rows, sizes[day])
            for day, durable in files.items()]


def archive_commit(*, files: list[ArchiveFile], rows: int) -> None:
    """List the files and delete the batch's rows (their attempts first: the files carry them), in
    the caller's transaction: all or nothing."""
    ArchiveFile.objects.bulk_create(files)
    _delete_batch_attempts()
    deleted = ScheduledMessage.objects.delete_prune_batch()
    if deleted != rows:
        raise PruneError(f"deleted {deleted} of the {rows} archived messages; rolled back")


def _delete_batch_attempts() -> int:
    """The attempts of the messages in this transaction's batch table, in one statement (joined on
    the attempts' index; the foreign key's cascade is Django's, not the database's)."""
    with connection.cursor() as cursor:
        cursor.execute(f'DELETE FROM {MessageAttempt._meta.db_table} a USING {PRUNE_BATCH} b '
                       f'WHERE a."message_id" = b.id')
        return cursor.rowcount


def audit_prune_batch(*, cutoff: datetime, after, limit: int, archive: Path,
                      traffic_cutoff: datetime | None = None) -> Batch | None:
    """message_prune_batch for the audit log: one transaction locks up to ``limit`` rows made
    before the cutoff (in at, id order, after ``after``), archives them, lists the files and
    deletes the rows; None when none are left."""
    with transaction.atomic():
        candidates = audit_list_past_retention(cutoff=cutoff, traffic_cutoff=traffic_cutoff)
        if after is not None:
            at, last_id = after
            candidates = candidates.filter(Q(at__gt=at) | Q(at=at, id__gt=last_id), at__gte=at)
        count, last = AuditEvent.objects.lock_prune_batch(candidates, limit=limit)
        if not count:
            return None
        files = audit_archive_write(rows=count, archive=archive)
        _commit_or_unlink(files, archive, lambda: audit_archive_commit(files=files, rows=count))
    return Batch(count, files, last)


def _commit_or_unlink(files, archive: Path, commit: Callable[[], None]) -> None:
    """List the files and delete their rows (``commit``); if that fails, the rows stay and their
    files go (else they would be the next prune's orphans)."""
    try:
        commit()
    except BaseException:
        for f in files:
            (archive / f.path).unlink(missing_ok=True)
        raise


def audit_archive_write(*, rows: int, archive: Path) -> list[AuditArchiveFile]:
    """The ``rows`` audit rows of the batch the caller locked, in durable files, one per day of
    ``at``, streamed; unsaved AuditArchiveFile rows describe them."""
    sql = audit_columns.select_sql(where=f'{audit_columns.A}."id" IN (SELECT id FROM {AUDIT_PRUNE_BATCH})')
    written = _write_days(parquet.copy_batches(sql=sql, params=[], kinds=audit_columns.KINDS), rows=rows,
                          what="audit rows", archive=archive, partition=audit_columns.partition_name,
                          day_column=audit_columns.DAY_COLUMN, schema=audit_columns.SCHEMA)
    return [AuditArchiveFile(path=path, day=day, rows=count, bytes=size) for day, path, count, size in written]


def audit_archive_commit(*, files: list[AuditArchiveFile], rows: int) -> None:
    """List the files and delete the batch's audit rows, in the caller's transaction."""
    AuditArchiveFile.objects.bulk_create(files)
    deleted = AuditEvent.objects.delete_prune_batch()
    if deleted != rows:
        raise PruneError(f"deleted {deleted} of the {rows} archived audit rows; rolled back")


def archive_remove_orphans(*, archive: Path) -> int:
    """Remove what killed prunes left: temporary files, and files no committed batch lists (their
    rows are still in the table), the messages' and the audit log's. Only under the prune lock:
    no other prune is writing."""
    removed = _remove_orphans(archive, archive.glob(f"{columns.DAY_COLUMN}=*"), ArchiveFile)
    audit = archive / audit_columns.DIRECTORY
    removed += _remove_orphans(archive, audit.glob(f"{audit_columns.DAY_COLUMN}=*"), AuditArchiveFile)
    _remove_if_empty(audit)
    return removed


def _remove_orphans(archive: Path, day_dirs, listing) -> int:
    removed = 0
    for day_dir in sorted(day_dirs):
        if not day_dir.is_dir():
            continue
        prefix = day_dir.relative_to(archive).as_posix()
        listed = set(listing.objects.filter(path__startswith=f"{prefix}/").values_list("path", flat=True))
        for entry in day_dir.iterdir():
            temporary = entry.name.startswith(f".{FILE_PREFIX}") and entry.name.endswith(".tmp")
            unlisted = (entry.name.startswith(FILE_PREFIX) and entry.name.endswith(FILE_SUFFIX)
                        and f"{prefix}/{entry.name}" not in listed)
            if temporary or unlisted:
                entry.unlink()
                removed += 1
                log.warning("removed %s, left by a prune that did not commit", entry)
        _remove_if_empty(day_dir)
    return removed


def archive_expire_days(*, now: datetime, archive: Path) -> int:
    """Delete the archive's days older than DELAY_ARCHIVE_RETENTION: unlisted first (committed),
    then their files (a crash between leaves unlisted files, which the next prune removes)."""
    retention = conf().archive_retention
    if retention is None:
        return 0
    return _expire(ArchiveFile.objects.filter(day__lt=(now - retention).date()), archive)


def audit_archive_expire_days(*, now: datetime, archive: Path) -> int:
    """The audit archive's days that left the table DELAY_ARCHIVE_RETENTION ago (made before now -
    DELAY_AUDIT_RETENTION - DELAY_ARCHIVE_RETENTION): counted from ``at`` alone, the two default
    400 days would delete each day as soon as it is archived."""
    settings = conf()
    if settings.archive_retention is None:
        return 0
    cutoff = now - settings.audit_retention - settings.archive_retention
    days = _expire(AuditArchiveFile.objects.filter(day__lt=cutoff.date()), archive)
    _remove_if_empty(archive / audit_columns.DIRECTORY)
    return days


def _expire(old, archive: Path) -> int:
    expired = list(old.values_list("path", flat=True))
    if not expired:
        return 0
    old.delete()
    days = {Path(path).parent for path in expired}
    for path in expired:
        (archive / path).unlink(missing_ok=True)
    for day in days:
        _remove_if_empty(archive / day)
    return len(days)


def _remove_if_empty(directory: Path) -> None:
    try:
        os.rmdir(directory)
    except OSError:
        pass  # not empty (or gone)

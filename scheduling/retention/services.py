"""Bounded history: a finished message stays in PostgreSQL for its retention (DELAY_RETENTION,
DELAY_FAILED_RETENTION for failed ones), then the prune moves it to the Parquet archive
(DELAY_ARCHIVE_DIR) and deletes its row. Pending and published messages are never pruned,
however old: a message due in eight years waits in the table for eight years.

Crash-safe and exact. Each batch is one transaction: its rows are locked, written to one file
per due date beside the file's final name (each message with its attempts), flushed, read back
(row count and ids), renamed into place, then listed in ArchiveFile and deleted, their attempts
with them, in the same commit. Killed before that commit, the
rows are still in the table and the file is not listed: the next prune removes such files
before it writes anything, so no message is lost and none is archived twice. One prune runs at
a time per database (an advisory lock, released by PostgreSQL when its session dies): a second
one started meanwhile (two beats) does nothing.

The audit log goes the same way, in the same run: rows older than DELAY_AUDIT_RETENTION are
archived (``_audit/`` in the archive, listed in AuditArchiveFile) and deleted in batches, the
trigger letting that DELETE alone through. Its archive keeps a day DELAY_ARCHIVE_RETENTION after
the day left the table.

Orphan copies (copies naming no row, set aside for the operator: delivery/orphans.py) not seen for
DELAY_ORPHAN_COPY_RETENTION are deleted in the same run, in batches of DELAY_PRUNE_BATCH, each its
own transaction; not archived: they are a decision the operator had that long to take (and an
export away, ``reconcile_after_restore --export-orphans``).

Events (issue 48) go once no message of theirs is left and they are older than the messages' longest
retention: their messages carry the event's id into the archive, the event row itself is not archived.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.db import connection, models, transaction
from django.db.models import Q
from django.utils import timezone
from uuid_utils.compat import uuid7

from scheduling.audit.selectors import audit_list_past_retention
from scheduling.config.conf import conf
from scheduling.core.durations import format_duration
from scheduling.core.lifecycle import Status
from scheduling.db.sql import PRUNE_BATCH
from scheduling.delivery.orphans import orphan_copy_prune_batch
from scheduling.delivery.selectors import orphan_copy_count
from scheduling.models import AccuracyReport, ArchiveFile, BulkAction, Event, MessageAttempt, ScheduledMessage
from scheduling.models.audit import AUDIT_PRUNE_BATCH, AuditArchiveFile, AuditEvent
from scheduling.retention import audit_columns, columns, parquet
from scheduling.retention.selectors import (
    message_count_in_flight_created_before,
    message_list_past_retention,
    message_table_get_bytes_per_row,
    message_table_is_autovacuumed,
)
from scheduling.teams.invitations import invitation_forget
from scheduling.teams.quotas import team_forget_copies

log = logging.getLogger(__name__)

PRUNE_LOCK = int.from_bytes(b"dp.prune", "big") & (2**63 - 1)  # pg advisory lock key (bigint)
FILE_PREFIX, FILE_SUFFIX = "part-", ".parquet"

Progress = Callable[[int, int], None]  # (done, to do): messages, or the audit log's rows


class PruneError(Exception):
    """The prune stopped; what it committed before stays committed, the rest is untouched."""


@dataclass
class PruneResult:
    dry_run: bool
    skipped: bool = False  # another prune holds the lock: this one did nothing
    candidates: int = 0  # finished messages past their retention when the run started
    archived: int = 0  # rows written to archive files that were committed
    deleted: int = 0  # rows deleted from the table
    files: int = 0
    archive_bytes: int = 0
    kept_in_flight: int = 0  # pending or published, accepted before the retention: never pruned
    reusable_bytes: int | None = None  # table + index space the deleted rows leave for new ones
    orphans_removed: int = 0  # files of killed runs, removed before writing
    archive_days_removed: int = 0  # days past DELAY_ARCHIVE_RETENTION
    report_rows_removed: int = 0  # accuracy report rows of those days
    audit_candidates: int = 0  # audit rows older than DELAY_AUDIT_RETENTION when the run started
    audit_archived: int = 0
    audit_deleted: int = 0
    audit_files: int = 0
    audit_archive_bytes: int = 0
    audit_days_removed: int = 0  # days of the audit archive past DELAY_ARCHIVE_RETENTION
    orphan_copy_candidates: int = 0  # orphan copies not seen for DELAY_ORPHAN_COPY_RETENTION when the run started
    orphan_copies_deleted: int = 0  # (not the orphaned files of killed runs: orphans_removed)
    event_candidates: int = 0  # events past the messages' longest retention with no message left
    events_deleted: int = 0
    vacuumed: bool = False  # the prune vacuumed the table itself (the server's autovacuum is off)
    seconds: float = 0.0


def retention_describe() -> str:
    """The window, in words, for pages that show messages and idempotency keys."""
    settings = conf()
    return (f"Finished messages stay here {format_duration(settings.retention)} after they finish (failed and "
            f"expired ones {format_duration(settings.failed_retention)}), then move to the archive; an "
            f"idempotency key is unique per endpoint within that window.")


def _prune_rules(now: datetime) -> list[tuple[Status, datetime]]:
    """(status, cutoff): messages of that status that finished before the cutoff go."""
    settings = conf()
    # expired: a dead letter like the failed (kept as long, to be looked at); superseded: replaced, like
    # cancelled; skipped: a schedule's run its overlap policy did not send, like cancelled
    return [(Status.DELIVERED, now - settings.retention), (Status.CANCELLED, now - settings.retention),
            (Status.FAILED, now - settings.failed_retention), (Status.EXPIRED, now - settings.failed_retention),
            (Status.SUPERSEDED, now - settings.retention), (Status.SKIPPED, now - settings.retention)]


def message_prune(*, now: datetime | None = None, dry_run: bool = False, progress: Progress | None = None,
                  audit_progress: Progress | None = None, orphan_progress: Progress | None = None,
                  event_progress: Progress | None = None) -> PruneResult:
    """Archive, then delete, every finished message past its retention, and the audit log's rows
    past theirs (see the module's doc). ``dry_run`` counts what would go and changes nothing."""
    started = time.monotonic()
    now = now or timezone.now()
    result = PruneResult(dry_run=dry_run)
    with _prune_lock() as held:
        if not held:
            result.skipped = True
            return result
        rules = _prune_rules(now)
        result.kept_in_flight = message_count_in_flight_created_before(cutoff=max(cutoff for _, cutoff in rules))
        result.candidates = sum(message_list_past_retention(status=s, cutoff=c).count() for s, c in rules)
        result.audit_candidates = audit_list_past_retention(**_audit_cutoffs(now)).count()
        result.orphan_copy_candidates = orphan_copy_count(before=now - conf().orphan_copy_retention)
        per_row = message_table_get_bytes_per_row()
        if dry_run:
            result.event_candidates = _events_unreferenced(now).count()
            result.reusable_bytes = round(result.candidates * per_row) if per_row else 0
        else:
            _prune(rules, now, result, progress or _quiet, audit_progress or _quiet, orphan_progress or _quiet)
            _events_prune(now, result, event_progress or _quiet)  # after the messages: their last ones just went
            result.reusable_bytes = round(result.deleted * per_row) if per_row else 0
    result.seconds = time.monotonic() - started
    return result


def _quiet(done: int, total: int) -> None:
    pass


def _prune(rules, now: datetime, result: PruneResult, progress: Progress, audit_progress: Progress,
           orphan_progress: Progress) -> None:
    settings = conf()
    archive = settings.archive_dir
    try:
        archive.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PruneError(f"cannot write to the archive {archive}: {exc.strerror or exc}") from None
    result.orphans_removed = archive_remove_orphans(archive=archive)
    progress(0, result.candidates)
    for status, cutoff in rules:
        after = None
        while batch := message_prune_batch(status=status, cutoff=cutoff, after=after, limit=settings.prune_batch,
                                   archive=archive, payloads=settings.archive_payloads):
            after = batch.last
            result.archived += batch.rows
            result.deleted += batch.rows
            result.files += len(batch.files)
            result.archive_bytes += sum(f.bytes for f in batch.files)
            progress(result.deleted, max(result.candidates, result.deleted))
            log.info("pruned %s: %d messages archived to %s and deleted (%d/%d)", status, batch.rows,
                     ", ".join(f.path for f in batch.files), result.deleted, result.candidates)
    _audit_prune(now, archive, result, audit_progress)
    _orphan_copies_prune(now, result, orphan_progress)
    result.archive_days_removed = archive_expire_days(now=now, archive=archive)
    result.audit_days_removed = audit_archive_expire_days(now=now, archive=archive)
    result.report_rows_removed = accuracy_report_expire(now=now)
    _expired_sessions_remove()
    # bulk actions (operators', not traffic's) go with the longest retention of the messages they changed
    BulkAction.objects.filter(finished_at__lt=now - max(settings.retention, settings.failed_retention)).delete()
    team_forget_copies(before=now)  # copies of cancelled or moved messages that have left the cascade
    invitation_forget(before=now - settings.retention)  # answered or expired: the audit log keeps them
    if result.deleted:
        result.vacuumed = message_table_vacuum_unattended()


def _audit_cutoffs(now: datetime) -> dict:
    """The changes go after DELAY_AUDIT_RETENTION; a message's own events with the messages."""
    settings = conf()
    return {"cutoff": now - settings.audit_retention,
            "traffic_cutoff": now - max(settings.retention, settings.failed_retention)}


def _audit_prune(now: datetime, archive: Path, result: PruneResult, progress: Progress) -> None:
    settings = conf()
    after = None
    progress(0, result.audit_candidates)
    while batch := audit_prune_batch(**_audit_cutoffs(now), after=after, limit=settings.prune_batch, archive=archive):
        after = batch.last
        result.audit_archived += batch.rows
        result.audit_deleted += batch.rows
        result.audit_files += len(batch.files)
        result.audit_archive_bytes += sum(f.bytes for f in batch.files)
        progress(result.audit_deleted, max(result.audit_candidates, result.audit_deleted))
        log.info("pruned the audit log: %d rows archived to %s and deleted (%d/%d)", batch.rows,
                 ", ".join(f.path for f in batch.files), result.audit_deleted, result.audit_candidates)


def _orphan_copies_prune(now: datetime, result: PruneResult, progress: Progress) -> None:
    """The orphan copies not seen for their retention, DELAY_PRUNE_BATCH a transaction."""
    settings = conf()
    before, limit = now - settings.orphan_copy_retention, settings.prune_batch
    progress(0, result.orphan_copy_candidates)
    while True:
        deleted = orphan_copy_prune_batch(before=before, limit=limit)
        result.orphan_copies_deleted += deleted
        if deleted:
            progress(result.orphan_copies_deleted, max(result.orphan_copy_candidates, result.orphan_copies_deleted))
            log.info("pruned %d orphan copies not seen for %s (%d/%d)", deleted,
                     format_duration(settings.orphan_copy_retention), result.orphan_copies_deleted,
                     result.orphan_copy_candidates)
        if deleted < limit:
            return


def _events_unreferenced(now: datetime):
    """Events older than the messages' longest retention with no message left in the table."""
    settings = conf()
    cutoff = now - max(settings.retention, settings.failed_retention)
    left = ScheduledMessage.objects.filter(event_id=models.OuterRef("pk"))  # the message_event index
    return Event.objects.filter(created_at__lt=cutoff).filter(~models.Exists(left))


def _events_prune(now: datetime, result: PruneResult, progress: Progress) -> None:
    """The events none of whose messages is left, oldest first, DELAY_PRUNE_BATCH a transaction;
    an old event whose messages stay (in flight, or failed within their longer retention) stays;
    each batch starts after the last one's (created_at, id), so no event is read twice a run."""
    limit, after = conf().prune_batch, None
    result.event_candidates = _events_unreferenced(now).count()
    progress(0, result.event_candidates)
    while True:
        batch = _events_unreferenced(now).order_by("created_at", "id")
        if after is not None:
            batch = batch.filter(Q(created_at__gt=after[0]) | Q(created_at=after[0], id__gt=after[1]))
        with transaction.atomic():
            rows = list(batch.select_for_update(skip_locked=True).values_list("created_at", "id")[:limit])
            if rows:
                Event.objects.filter(pk__in=[pk for _, pk in rows]).delete()
        result.events_deleted += len(rows)
        if rows:
            after = rows[-1]
            progress(result.events_deleted, max(result.event_candidates, result.events_deleted))
            log.info("pruned %d events with no message left (%d/%d)", len(rows), result.events_deleted,
                     result.event_candidates)
        if len(rows) < limit:
            return


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


def message_table_vacuum_unattended() -> bool:
    """VACUUM the messages table when nothing else will (the server runs without autovacuum, or
    the table is excluded from it): its deleted and updated rows' space is then reused before the
    next prune instead of never. Returns whether it vacuumed. Not inside a transaction (VACUUM
    cannot run in one)."""
    if connection.in_atomic_block or message_table_is_autovacuumed():
        return False
    log.warning("autovacuum is off for %s: the prune vacuums it "
                "(turn autovacuum on: see docs/operations/retention.md, Vacuum)", ScheduledMessage._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE) {ScheduledMessage._meta.db_table}")
    return True


def accuracy_report_expire(*, now: datetime) -> int:
    """The report's rows of days older than DELAY_ARCHIVE_RETENTION: their facts are gone too."""
    retention = conf().archive_retention
    if retention is None:
        return 0
    return AccuracyReport.objects.filter(day__lt=(now - retention).date()).delete()[0]


def _expired_sessions_remove() -> None:
    """Admin logins' expired sessions (what ``clearsessions`` does; nothing else runs it)."""
    from importlib import import_module

    from django.conf import settings

    import_module(settings.SESSION_ENGINE).SessionStore.clear_expired()


def _remove_if_empty(directory: Path) -> None:
    try:
        os.rmdir(directory)
    except OSError:
        pass  # not empty (or gone)


def _prune_lock() -> _AdvisoryLock:
    return _AdvisoryLock(PRUNE_LOCK)


class _AdvisoryLock:
    """A session-level advisory lock on Django's connection: held until released or until the
    session ends (a killed process releases it)."""

    def __init__(self, key: int):
        self.key, self.held = key, False

    def __enter__(self) -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [self.key])
            self.held = cursor.fetchone()[0]
        return self.held

    def __exit__(self, *exc) -> None:
        if self.held and connection.connection is not None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [self.key])

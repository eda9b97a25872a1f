"""Bounded history: a finished message stays in PostgreSQL for its retention (DELAY_RETENTION,
DELAY_FAILED_RETENTION for failed ones), then the prune moves it to the Parquet archive
(DELAY_ARCHIVE_DIR) and deletes its row. Pending and published messages are never pruned,
however old: a message due in eight years waits in the table for eight years.

Crash-safe and exact: each batch is archived, listed and deleted in one transaction
(archives.py). One prune runs at a time per database (an advisory lock, released by PostgreSQL
when its session dies): a second one started meanwhile (two beats) does nothing.

The audit log goes the same way, in the same run: rows older than DELAY_AUDIT_RETENTION are
archived (``_audit/`` in the archive, listed in AuditArchiveFile) and deleted in batches, the
trigger letting that DELETE alone through. Its archive keeps a day DELAY_ARCHIVE_RETENTION after
the day left the table.

The same run prunes the other tables (table_prunes.py): orphan copies, events left without
messages, the accuracy report's old days, finished bulk actions, expired admin sessions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.db import connection
from django.utils import timezone

from scheduling.audit.selectors import audit_list_past_retention
from scheduling.config.conf import conf
from scheduling.core.durations import format_duration
from scheduling.core.lifecycle import Status
from scheduling.delivery.selectors import orphan_copy_count
from scheduling.models import ScheduledMessage
from scheduling.retention.archives import (
    PruneError,
    archive_expire_days,
    archive_remove_orphans,
    audit_archive_expire_days,
    audit_prune_batch,
    message_prune_batch,
)
from scheduling.retention.selectors import (
    message_count_in_flight_created_before,
    message_list_past_retention,
    message_table_get_bytes_per_row,
    message_table_is_autovacuumed,
)
from scheduling.retention.table_prunes import (
    accuracy_report_expire,
    bulk_action_forget,
    event_list_unreferenced,
    event_prune,
    orphan_copy_prune,
    session_forget_expired,
)
from scheduling.teams.invitations import invitation_forget
from scheduling.teams.quotas import team_forget_copies

log = logging.getLogger(__name__)

PRUNE_LOCK = int.from_bytes(b"dp.prune", "big") & (2**63 - 1)  # pg advisory lock key (bigint)

Progress = Callable[[int, int], None]  # (done, to do): messages, or the audit log's rows


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
            result.event_candidates = event_list_unreferenced(now=now).count()
            result.reusable_bytes = round(result.candidates * per_row) if per_row else 0
        else:
            _prune(rules, now, result, progress or _quiet, audit_progress or _quiet, orphan_progress or _quiet)
            # after the messages: their last ones just went
            result.event_candidates = event_list_unreferenced(now=now).count()
            result.events_deleted = event_prune(now=now, candidates=result.event_candidates,
                                                progress=event_progress or _quiet)
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
    result.orphan_copies_deleted = orphan_copy_prune(now=now, candidates=result.orphan_copy_candidates,
                                                     progress=orphan_progress)
    result.archive_days_removed = archive_expire_days(now=now, archive=archive)
    result.audit_days_removed = audit_archive_expire_days(now=now, archive=archive)
    result.report_rows_removed = accuracy_report_expire(now=now)
    session_forget_expired()
    # bulk actions (operators', not traffic's) go with the longest retention of the messages they changed
    bulk_action_forget(before=now - max(settings.retention, settings.failed_retention))
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

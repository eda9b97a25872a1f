"""The prune's other tables, in the same run as the messages and the audit log (services.py):
none of them archived.

Orphan copies (copies naming no row, set aside for the operator: delivery/orphans.py) not seen for
DELAY_ORPHAN_COPY_RETENTION are deleted in batches of DELAY_PRUNE_BATCH, each its own transaction;
not archived: they are a decision the operator had that long to take (and an export away,
``reconcile_after_restore --export-orphans``).

Events (issue 48) go once no message of theirs is left and they are older than the messages' longest
retention: their messages carry the event's id into the archive, the event row itself is not archived.

The accuracy report's days go with the archive's (DELAY_ARCHIVE_RETENTION), finished bulk actions
with the messages' longest retention, and admin logins' expired sessions at every run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.db import models, transaction
from django.db.models import Q

from scheduling.config.conf import conf
from scheduling.core.durations import format_duration
from scheduling.delivery.orphans import orphan_copy_prune_batch
from scheduling.models import AccuracyReport, BulkAction, ScheduledMessage
from scheduling.models.events import Event

log = logging.getLogger(__name__)


def orphan_copy_prune(*, now: datetime, candidates: int, progress: Callable[[int, int], None]) -> int:
    """The orphan copies not seen for their retention, DELAY_PRUNE_BATCH a transaction; how many
    went (``candidates``: how many the run counted when it started)."""
    settings = conf()
    before, limit = now - settings.orphan_copy_retention, settings.prune_batch
    deleted_all = 0
    progress(0, candidates)
    while True:
        deleted = orphan_copy_prune_batch(before=before, limit=limit)
        deleted_all += deleted
        if deleted:
            progress(deleted_all, max(candidates, deleted_all))
            log.info("pruned %d orphan copies not seen for %s (%d/%d)", deleted,
                     format_duration(settings.orphan_copy_retention), deleted_all, candidates)
        if deleted < limit:
            return deleted_all


def event_list_unreferenced(*, now: datetime):
    """Events older than the messages' longest retention with no message left in the table."""
    settings = conf()
    cutoff = now - max(settings.retention, settings.failed_retention)
    left = ScheduledMessage.objects.filter(event_id=models.OuterRef("pk"))  # the message_event index
    return Event.objects.filter(created_at__lt=cutoff).filter(~models.Exists(left))


def event_prune(*, now: datetime, candidates: int, progress: Callable[[int, int], None]) -> int:
    """The events none of whose messages is left, oldest first, DELAY_PRUNE_BATCH a transaction;
    an old event whose messages stay (in flight, or failed within their longer retention) stays;
    each batch starts after the last one's (created_at, id), so no event is read twice a run.
    How many went (``candidates``: how many event_list_unreferenced counted just before)."""
    limit, after = conf().prune_batch, None
    deleted = 0
    progress(0, candidates)
    while True:
        batch = event_list_unreferenced(now=now).order_by("created_at", "id")
        if after is not None:
            batch = batch.filter(Q(created_at__gt=after[0]) | Q(created_at=after[0], id__gt=after[1]))
        with transaction.atomic():
            rows = list(batch.select_for_update(skip_locked=True).values_list("created_at", "id")[:limit])
            if rows:
                Event.objects.filter(pk__in=[pk for _, pk in rows]).delete()
        deleted += len(rows)
        if rows:
            after = rows[-1]
            progress(deleted, max(candidates, deleted))
            log.info("pruned %d events with no message left (%d/%d)", len(rows), deleted, candidates)
        if len(rows) < limit:
            return deleted


def accuracy_report_expire(*, now: datetime) -> int:
    """The report's rows of days older than DELAY_ARCHIVE_RETENTION: their facts are gone too."""
    retention = conf().archive_retention
    if retention is None:
        return 0
    return AccuracyReport.objects.filter(day__lt=(now - retention).date()).delete()[0]


def bulk_action_forget(*, before: datetime) -> None:
    """Bulk actions (operators', not traffic's) finished before ``before``: the prune passes the
    longest retention of the messages they changed."""
    BulkAction.objects.filter(finished_at__lt=before).delete()


def session_forget_expired() -> None:
    """Admin logins' expired sessions (what ``clearsessions`` does; nothing else runs it)."""
    from importlib import import_module

    from django.conf import settings

    import_module(settings.SESSION_ENGINE).SessionStore.clear_expired()

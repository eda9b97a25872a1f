"""New rows written ``published`` in the request's own insert, their routes fixed, and sent after
the commit (relay_claim_new, relay_send_claimed): no lock and no second update per row, which
would be half of PostgreSQL's work per scheduled message (docs/operations/performance.md). Apart
from the relay's outbox (relay.py: lock pending rows, publish, mark), which takes whatever this
leaves out or hands back; the rescue (rescue.py) covers the one window it opens."""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.utils import timezone

from rabbit.gather import GatherTimeout
from scheduling.config.conf import conf
from scheduling.core.lifecycle import Status
from scheduling.messages.batches import relay_prepare
from scheduling.messages.gathering import GATHERER, Claimed, Part, relay_gather
from scheduling.messages.relay import PUBLISHED, RelayResult, publish_pause
from scheduling.messages.rescue import message_rescue_covers
from scheduling.models import ScheduledMessage

log = logging.getLogger("scheduling.messages.relay")  # the relay's lines, under the name they always had


def relay_claim_new(*, rows: list[ScheduledMessage]) -> Claimed | None:
    """Write new rows as ``published`` and publish them after their commit, without locking and
    updating them again: that lock and update would be half of PostgreSQL's work per scheduled
    message (docs/operations/performance.md). The route is fixed now and sent as is after the commit (a
    few ms later, inside the arrival margin).

    Only where the rescue covers the one window this opens, a process killed between the commit
    and the publish (rows say published, the broker never got them): DELAY_RESCUE_AFTER_MS on,
    native rows (of every handler: a celery_queue endpoint's rows are rescued too, and its
    workers' claim skips the copy that comes second), and a broker that did not refuse lately.
    Those rows are published again once overdue, DELAY_RESCUE_AFTER_MS late.
    Everything else (None, or the rows left out) goes the outbox's way: relay_publish_rows."""
    settings = conf()
    eligible = [row for row in rows if message_rescue_covers(message=row)]
    if not eligible or not settings.rescue_after_ms or publish_pause.held():
        return None
    now = timezone.now()
    batch = relay_prepare(rows=eligible, now=now, direct=False)
    for row in batch.unbuilt:  # not claimed: pending, the outbox's way fails them with the reason
        row.last_error = ""
    if not batch.groups:
        return None
    for group, (_, route) in zip(batch.groups, batch.prepared, strict=True):
        for row in group:
            row.status, row.published_at = PUBLISHED, now
            row.routing_key, row.first_exchange = route.routing_key, route.exchange
    claimed = [row for group in batch.groups for row in group]
    # said now, between writing the rows and their commit: a batch under load waits for them
    return Claimed(claimed, batch.groups, batch.prepared, now, GATHERER.expect())


def relay_send_claimed(*, claimed: Claimed) -> RelayResult:
    """After the commit: publish what relay_claim_new prepared, with the rows other requests of this
    process committed meanwhile (their envelopes merged where their routes agree). Rows the broker
    did not confirm go back to pending for the sweeper (compare-and-set: one cancelled meanwhile
    stays cancelled)."""
    result = RelayResult()
    try:
        try:
            part = relay_gather(part=Part(claimed=claimed))
        except Exception as exc:  # noqa: BLE001 (unknown whether they went: the rows stay published, the rescue
            # covers them; the request, committed, is not failed for it)
            log.warning("publishing after commit failed (%s); %d message(s) left to the rescue", exc,
                        len(claimed.rows), exc_info=not isinstance(exc, GatherTimeout))
            result.errors.append(str(exc))
            return result
        unsent = claimed.rows if part.unavailable else part.failed
        result.published, result.failed = len(claimed.rows) - len(unsent), len(unsent)
        result.errors += part.errors
        if unsent:
            publish_pause.hold()
            reason = result.errors[0] if result.errors else "publish failed"
            ScheduledMessage.objects.filter(
                id__in=[row.id for row in unsent], status=PUBLISHED, published_at=claimed.published_at,
            ).update(status=Status.PENDING, published_at=None, last_error=reason)
            for row in unsent:
                row.status, row.published_at, row.last_error = Status.PENDING, None, reason
            log.warning("relay not reached (%s); %d message(s) stay pending for the sweeper", reason, len(unsent))
    except DatabaseError as exc:  # the rows stay published: the rescue sends them once overdue
        log.warning("returning unpublished rows to the sweeper failed (%s); the rescue will publish them", exc)
    return result


"""After PostgreSQL is restored to an earlier time (backup time B) while messages were in flight:
reconcile the broker, which was not restored, with the database (docs/operations/backup-and-restore.md).

What the two disagree on, and what is done:

- rows the database has in flight whose copies the broker no longer holds: the messages delivered
  (or cancelled) after B, in flight again in the restored database. Their copies were consumed
  before the restore, so the broker will never hand them over again. They are told apart by time:
  a row still ``published`` long after its due time has no copy coming. Each is published again,
  straight to its version's delivery exchange (as the rescue does, messages/rescue.py, but for
  every handler and at once, so the runbook does not wait for it). Those that had been delivered
  arrive a second time: webhook receivers dedupe on ``webhook-id`` (the message id), Celery tasks
  claim their row (celery/services.py) -- once, since the restored row says ``published``.
- copies the broker holds with no row: the messages scheduled after B. Nothing can be published
  for them (their payloads were in the lost rows); they are set aside as they arrive
  (delivery/orphans.py), and this reports how many so far.

Pending rows are the relay's (its sweeper publishes them); rows not yet due have their copies in
the cascade. Both are only counted here.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from rabbit import Outgoing
from scheduling.config.conf import broker
from scheduling.core.lifecycle import Status
from scheduling.delivery.selectors import orphan_copy_count
from scheduling.messages import wire
from scheduling.messages.unroutable import message_build_copies
from scheduling.models import DeliveryMode, Endpoint, ScheduledMessage, TopologyVersion
from topology import cascade

log = logging.getLogger(__name__)

BATCH = 500


@dataclass
class Reconciled:
    """What a reconciliation found and did (a dry run: found only)."""

    pending: int = 0  # rows the relay has still to publish (its sweeper does)
    waiting: int = 0  # published, not yet overdue: their copies are in the cascade
    overdue: int = 0  # published and overdue by more than the cutoff: no copy is coming
    republished: int = 0  # of those, published again (broker confirmed)
    unconfirmed: int = 0  # published again but not confirmed: run again
    unbuildable: int = 0  # no copy could be built (failed, with the reason)
    skipped: int = 0  # locked by a delivery or with a webhook call out right now: left to it
    orphans: int = 0  # copies with no row set aside so far (since ``orphans_since``)
    broker_messages: int | None = None  # broker messages in the cascade and endpoint queues, if asked
    broker_problem: str = ""
    seconds: float = 0.0
    oldest_due: datetime | None = None


def _overdue(cutoff: datetime):
    return ScheduledMessage.objects.filter(status=Status.PUBLISHED, delivery_mode=DeliveryMode.NATIVE,
                                           due_at__lt=cutoff)


def _copy(row: ScheduledMessage, now: datetime) -> Outgoing:
    """The row's copy, overdue so straight to its delivery exchange; a row waiting for a handler
    retry (attempts > 0) gets its retry's copy (the attempt it waits for), a task its task message."""
    out, _ = wire.outgoing(row, row.topology.cascade, now, margin_ms=0)
    if row.attempts and row.endpoint.handler != Endpoint.Handler.CELERY_QUEUE:
        body, headers, properties = wire.deliver_message(str(row.id), row.due_at, row.attempts)
        out = dataclasses.replace(out, body=body, headers={**out.headers, **headers}, properties=properties)
    return out


def _republish(rows: list[ScheduledMessage], now: datetime, result: Reconciled) -> None:
    _, copies, unbuildable = message_build_copies(rows=rows, build=lambda row: _copy(row, now))
    result.unbuildable += unbuildable
    if copies:
        outcome = broker().publish(copies)
        result.republished += len(outcome.confirmed)
        result.unconfirmed += len(copies) - len(outcome.confirmed)


def _broker_messages() -> int:
    """Messages in the level queues of every version and in the endpoint queues (management API)."""
    on = broker()
    depths = on.management.queue_depths(on.vhost)
    names = set(Endpoint.objects.values_list("queue", flat=True))
    for version in TopologyVersion.objects.all():
        plan = version.cascade
        names |= {cascade.level_name(version.prefix, level, shard)
                  for level in range(version.levels) for shard in range(plan.shards)}
    return sum(int((depths.get(name) or {}).get("messages") or 0) for name in names)


def message_reconcile_after_restore(*, overdue_after: timedelta, dry_run: bool = False,
                                    orphans_since: datetime | None = None, compare_broker: bool = False,
                                    batch: int = BATCH,
                                    progress: Callable[[int, int], None] | None = None) -> Reconciled:
    """Count what the restored database has in flight; unless ``dry_run``, publish again every
    native row still ``published`` more than ``overdue_after`` past its due time (its copy was
    consumed after the backup was taken), ``batch`` rows a transaction, locked (SKIP LOCKED: a row
    being delivered right now is left to its delivery). ``progress(done, total)`` after each batch.
    ``compare_broker``: also read the broker's queue depths (the faster, rougher answer: more
    messages there than rows in flight means copies with no row are on their way)."""
    started = time.monotonic()
    now = timezone.now()
    cutoff = now - overdue_after
    result = Reconciled()
    result.pending = ScheduledMessage.objects.filter(status=Status.PENDING).count()
    result.waiting = ScheduledMessage.objects.filter(status=Status.PUBLISHED, due_at__gte=cutoff).count()
    result.overdue = _overdue(cutoff).count()
    result.oldest_due = _overdue(cutoff).order_by("due_at").values_list("due_at", flat=True).first()
    result.orphans = orphan_copy_count(since=orphans_since)
    if compare_broker:
        try:
            result.broker_messages = _broker_messages()
        except Exception as exc:  # noqa: BLE001 (the management API away: the rest of the report stands)
            result.broker_problem = f"{type(exc).__name__}: {exc}"
    if dry_run or not result.overdue:
        result.seconds = time.monotonic() - started
        return result
    after: tuple[datetime, str] | None = None
    done = 0
    while True:
        with transaction.atomic():
            query = (_overdue(cutoff).select_related("endpoint", "topology")
                     .select_for_update(skip_locked=True, of=("self",)).order_by("due_at", "id"))
            if after is not None:
                query = query.filter(Q(due_at__gt=after[0]) | Q(due_at=after[0], id__gt=after[1]))
            rows = list(query[:batch])
            if not rows:
                break
            after = (rows[-1].due_at, rows[-1].id)
            free = [row for row in rows if row.call_lease_until is None or row.call_lease_until <= now]
            result.skipped += len(rows) - len(free)
            _republish(free, now, result)
        done += len(rows)
        if progress is not None:
            progress(done, result.overdue)
    result.skipped += max(0, result.overdue - done)  # locked by a delivery when their batch was read
    log.warning("reconciled after a restore: %d overdue row(s) published again (%d not confirmed, %d unbuildable, "
                "%d left to a delivery in progress); %d cop(ies) with no row set aside so far",
                result.republished, result.unconfirmed, result.unbuildable, result.skipped, result.orphans)
    result.seconds = time.monotonic() - started
    return result

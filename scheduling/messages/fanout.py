"""The far end of an event copy (docs/concepts/fan-out.md): an event crosses the cascade as one
broker message whatever its number of messages; when it is due, each of its rows still waiting
gets its own copy, published straight to its endpoint's queue through its version's delivery
exchange (no delay left), where it is delivered as any message is.

Why here and not in the relay: the cascade costs the broker a publish, a dead-letter hop per set
bit of the delay and a consume per broker message; an event of 50 messages pays that once, and
the 50 copies at the far end cost a publish and a consume each.

Rows are locked (SKIP LOCKED, as the rescue does) while their copies are published with confirms,
and stamped (``published_at``) in the same transaction: a second copy of the event (the broker's
at-least-once dead-lettering, a worker killed before its ack) finds them published after its own
``x-dp-published-at-ms`` and skips them. A copy that still gets through twice (a worker killed
between the confirms and the commit) is suppressed by each row's claim: handlers run once. Rows
cancelled, delivered or already retried (attempts > 0) are left alone; a row none can be built of
is failed alone, with the reason (message_build_copies)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from rabbit import Outcome, Outgoing

from scheduling.core.clock import from_epoch_ms
from scheduling.core.lifecycle import Status
from scheduling.messages import wire
from scheduling.messages.unroutable import message_build_copies
from scheduling.models import Endpoint, ScheduledMessage


@dataclass
class FanOut:
    """What became of an event copy's rows: copies confirmed, rows failed as unbuildable, copies
    the broker did not confirm (the event copy must then stay unacked and be tried again)."""

    published: int = 0
    unbuildable: int = 0
    unconfirmed: int = 0
    skipped: int = 0  # rows not waiting any more (delivered, cancelled, fanned out by an earlier copy)
    tasks_waiting: int = 0  # Celery-queue rows left for the fan-out at due (``tasks`` False)
    missing: list[str] = field(default_factory=list)  # ids the copy carries with no row at all (a restore)
    errors: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return not self.unconfirmed


def _load_task_payloads(rows: list[ScheduledMessage]) -> None:
    """A Celery queue's row carries its task message in the payload (the lock loaded no payloads)."""
    tasks = [row for row in rows if row.endpoint.handler == Endpoint.Handler.CELERY_QUEUE]
    if tasks:
        payloads = dict(ScheduledMessage.objects.filter(id__in=[r.id for r in tasks]).values_list("id", "payload"))
        for row in tasks:
            row.payload = payloads[row.id]


def message_fan_out(*, event_id: str, ids: list[str], published_at_ms: int | None,
                    publish: Callable[[list[Outgoing]], Outcome], tasks: bool = True) -> FanOut:
    """Publish a copy of each of the event's rows ``ids`` still waiting for this event copy
    (``published``, no attempt yet, published no later than the copy's ``published_at_ms``), each
    through its version's delivery exchange, with confirms, and stamp the confirmed ones. Raises
    what ``publish`` raises (BrokerUnavailable) and DatabaseError: nothing is stamped then.

    ``tasks`` False (the loop's fan-out before due, as the event copy arrives): only the rows whose
    copy the delivery loop holds until due (every handler but a Celery queue's), so the fan-out's
    own time is not added to their lateness; a Celery queue's task message runs the moment it
    arrives, so those rows are left for the fan-out at due (counted in ``tasks_waiting``)."""
    result = FanOut()
    now = timezone.now()
    with transaction.atomic():
        qs = (ScheduledMessage.objects.select_for_update(skip_locked=True, of=("self",))
              .select_related("endpoint", "topology").only(*wire.PUBLISH_FIELDS)
              .filter(id__in=ids, event_id=event_id, status=Status.PUBLISHED, attempts=0))
        if published_at_ms is not None:  # a row stamped after this copy left was fanned out by another
            qs = qs.filter(published_at__lt=from_epoch_ms(published_at_ms) + timedelta(milliseconds=1))
        rows = list(qs.order_by("id"))
        result.skipped = len(ids) - len(rows)
        if result.skipped:  # not waiting, or no row at all: the latter are orphans (delivery/orphans.py)
            found = {str(i) for i in ScheduledMessage.objects.filter(id__in=ids).values_list("id", flat=True)}
            result.missing = [i for i in ids if i not in found]
        if not tasks:
            result.tasks_waiting = sum(1 for row in rows if row.endpoint.handler == Endpoint.Handler.CELERY_QUEUE)
            rows = [row for row in rows if row.endpoint.handler != Endpoint.Handler.CELERY_QUEUE]
        if not rows:
            return result
        _load_task_payloads(rows)
        rows, copies, result.unbuildable = message_build_copies(
            rows=rows, build=lambda row: wire.outgoing(row, row.topology.cascade, now, margin_ms=0)[0])
        if not rows:
            return result
        outcome = publish(copies)
        confirmed = [row for index, row in enumerate(rows) if index in outcome.confirmed]
        result.published, result.unconfirmed = len(confirmed), len(rows) - len(confirmed)
        if outcome.error:
            result.errors.append(outcome.error)
        if confirmed:
            ScheduledMessage.objects.filter(id__in=[row.id for row in confirmed], status=Status.PUBLISHED) \
                .update(published_at=now)
    return result

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
from django.db.models import Q
from django.utils import timezone

from rabbit import Outcome, Outgoing
from scheduling.core.clock import from_epoch_ms
from scheduling.core.lifecycle import Status
from scheduling.messages import wire
from scheduling.messages.selectors import message_load_task_payloads
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
    event = wire.EventCopy(str(event_id), tuple(wire.Delivery(str(i), 0, 0) for i in ids), published_at_ms)
    return message_fan_out_many(copies=[(event, tasks)], publish=publish)[0]


def _waiting(event: wire.EventCopy) -> Q:
    """The rows of the event copy still waiting for it (see message_fan_out)."""
    condition = Q(event_id=event.event_id, id__in=event.ids)
    if event.published_at_ms is not None:  # a row stamped after this copy left was fanned out by another
        condition &= Q(published_at__lt=from_epoch_ms(event.published_at_ms) + timedelta(milliseconds=1))
    return condition


def message_fan_out_many(*, copies: list[tuple[wire.EventCopy, bool]],
                         publish: Callable[[list[Outgoing]], Outcome]) -> list[FanOut]:
    """message_fan_out for several event copies (each with its ``tasks``) at once: one transaction,
    one publish and one stamp for all, so a fan-out thread keeps up with many small events (its
    time is round trips: the lock, the confirms, the stamp). One result per copy, in order; a second
    copy of an event in the same call finds its rows taken by the first."""
    results = [FanOut() for _ in copies]
    now = timezone.now()
    condition = Q()
    for event, _ in copies:
        condition |= _waiting(event)
    with transaction.atomic():
        rows = list(ScheduledMessage.objects.select_for_update(skip_locked=True, of=("self",))
                    .select_related("endpoint", "topology").only(*wire.PUBLISH_FIELDS)
                    .filter(condition, status=Status.PUBLISHED, attempts=0).order_by("id"))
        by_event: dict[str, list[ScheduledMessage]] = {}
        for row in rows:
            by_event.setdefault(str(row.event_id), []).append(row)
        chosen: list[tuple[FanOut, ScheduledMessage]] = []
        skipped_ids = []
        for (event, tasks), result in zip(copies, results):
            mine = by_event.pop(event.event_id, [])
            result.skipped = len(event.ids) - len(mine)
            if result.skipped:
                skipped_ids += event.ids
            if not tasks:
                result.tasks_waiting = sum(1 for row in mine if row.endpoint.handler == Endpoint.Handler.CELERY_QUEUE)
                mine = [row for row in mine if row.endpoint.handler != Endpoint.Handler.CELERY_QUEUE]
            chosen += [(result, row) for row in mine]
        if skipped_ids:  # not waiting, or no row at all: the latter are orphans (delivery/orphans.py)
            found = {str(i) for i in ScheduledMessage.objects.filter(id__in=skipped_ids).values_list("id", flat=True)}
            for (event, _), result in zip(copies, results):
                if result.skipped:
                    result.missing = [i for i in event.ids if i not in found]
        if not chosen:
            return results
        owner = {id(row): result for result, row in chosen}
        built_rows = [row for _, row in chosen]
        message_load_task_payloads(rows=built_rows)
        built, outgoing, _ = message_build_copies(
            rows=built_rows, build=lambda row: wire.outgoing(row, row.topology.cascade, now, margin_ms=0)[0])
        built_ids = {id(row) for row in built}
        for result, row in chosen:
            if id(row) not in built_ids:
                result.unbuildable += 1
        if not built:
            return results
        outcome = publish(outgoing)
        confirmed = []
        for index, row in enumerate(built):
            if index in outcome.confirmed:
                owner[id(row)].published += 1
                confirmed.append(row)
            else:
                owner[id(row)].unconfirmed += 1
                if outcome.error and outcome.error not in owner[id(row)].errors:
                    owner[id(row)].errors.append(outcome.error)
        if confirmed:
            ScheduledMessage.objects.filter(id__in=[row.id for row in confirmed], status=Status.PUBLISHED) \
                .update(published_at=now)
    return results

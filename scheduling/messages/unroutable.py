"""Messages the broker cannot carry, failed with the reason. Those the delivery exchange could not
route (no queue bound for their destination) are kept by its alternate exchange in
``<prefix>delay-unroutable``: the drain marks their rows failed with the reason, then acks; the
row holds all it takes to republish them. Rows no broker message can be built of are failed by
whoever tried to publish them (message_mark_unbuildable).

A copy published before its row's latest publish is stale and only acked: the rescue copies an
overdue message every few hundred ms until the drain (every 5 s) marks it failed, so copies of
one publish can reach the queue on both sides of a drain, and the late one must not fail the
message an operator has since re-bound and republished."""

from __future__ import annotations

import logging

from django.utils import timezone

from scheduling.config.conf import broker, conf
from scheduling.core import lifecycle
from scheduling.core.clock import from_epoch_ms
from scheduling.core.lifecycle import Event
from scheduling.messages import wire
from scheduling.models import ScheduledMessage
from scheduling.versions.selectors import topology_version_list_provisioned
from topology import cascade

log = logging.getLogger(__name__)


def message_mark_unroutable(*, message_id: str, reason: str, copy_published_at_ms: int | None = None) -> int:
    """The lifecycle's ``unroutable`` for a message the broker cannot carry to its destination
    (here, or parked by a migration): ``failed`` with the reason, ready to republish. Given when
    the copy was published (``x-dp-published-at-ms``), a row published again since is left alone."""
    change = lifecycle.unroutable(reason=reason, now=timezone.now())
    rows = ScheduledMessage.objects.filter(id=message_id, status__in=lifecycle.sources(Event.UNROUTABLE))
    if copy_published_at_ms is not None:  # the row's published_at is floored to ms in the header
        rows = rows.exclude(published_at__gte=from_epoch_ms(copy_published_at_ms + 1))
    return rows.update(**change)


def message_build_copies(*, rows: list[ScheduledMessage], build) -> tuple[list[ScheduledMessage], list, int]:
    """Each locked row's broker copy (``build(row)``): answers the rows a copy was made of, their
    copies in the same order, and how many rows none could be made of, which are marked
    ``unbuildable`` alone (message_mark_unbuildable) so the rest still go out. The rescue and the
    reconciliation after a restore share it."""
    built, copies, unbuilt = [], [], []
    for row in rows:
        try:
            copies.append(build(row))
        except wire.Unbuildable as exc:
            row.last_error = str(exc)
            unbuilt.append(row)
            continue
        built.append(row)
    return built, copies, message_mark_unbuildable(rows=unbuilt) if unbuilt else 0


def message_mark_unbuildable(*, rows: list[ScheduledMessage]) -> int:
    """The lifecycle's ``unbuildable`` for locked rows no broker message could be made of (the
    relay, the timeout manager, the rescue): each ``failed`` alone with the reason in its
    ``last_error``, so the rest of its batch is published; republish it once its endpoint takes it
    again. Returns how many were marked."""
    now, marked = timezone.now(), 0
    for row in rows:
        change = lifecycle.unbuildable(reason=row.last_error[:2000], now=now)
        marked += ScheduledMessage.objects.filter(
            id=row.id, status__in=lifecycle.sources(Event.UNBUILDABLE)).update(**change)
        lifecycle.apply(row, change)
    log.warning("marked %d message(s) failed that cannot be built (%s): %s", marked,
                ", ".join(str(row.id) for row in rows[:5]) + (", ..." if len(rows) > 5 else ""), rows[0].last_error)
    return marked


def _mark_failed(message_id: str, destination: str, prefix: str, copy_published_at_ms: int | None) -> int:
    return message_mark_unroutable(message_id=message_id, copy_published_at_ms=copy_published_at_ms, reason=(
        f"unroutable: no queue is bound for {destination!r} on {cascade.delivery_exchange(prefix)} "
        "(queue deleted or unbound); re-bind the endpoint and republish"
    ))


def _event_copy_left_to_rescue(event: wire.EventCopy) -> bool:
    """An event copy the delivery exchange could not route: the fan-out queue is not bound there
    (``provision_delays`` not run since the upgrade, or the queue deleted). Its rows are not the
    ones at fault: with the rescue on they stay ``published`` and each is sent alone once overdue
    (DELAY_RESCUE_AFTER_MS; an unbound endpoint's copy then comes back here on its own, and fails
    alone). Off, they are failed with the reason, as any unroutable copy's."""
    if not conf().rescue_after_ms:
        return False
    log.warning("event %s's copy was unroutable (is %s bound? run provision_delays): its %d message(s) are "
                "left to the rescue, each alone", event.event_id, cascade.FANOUT_QUEUE, len(event.ids))
    return True


def unroutable_drain(*, limit: int = 1000) -> int:
    """Read each provisioned version's unroutable queue; returns how many rows were marked."""
    marked = 0
    with broker().session() as session:
        for version in topology_version_list_provisioned():
            with session.reader(cascade.unroutable_name(version.prefix)) as reader:
                for message in reader.get(limit):
                    event = wire.read_event_copy(message.headers, message.body)
                    if event is not None and _event_copy_left_to_rescue(event):
                        reader.ack(message)
                        continue
                    ids = wire.carried_ids(message.headers, message.body)
                    if not ids:  # not one of ours: leave it (unacked) for an operator
                        continue
                    _, destination = cascade.read_route(version.cascade, message.routing_key,
                                                        message.headers.get(cascade.CC_HEADER))
                    published_ms = wire.int_header(message.headers, wire.H_PUBLISHED_AT_MS)
                    updated = sum(_mark_failed(i, destination or message.routing_key, version.prefix, published_ms)
                                  for i in ids)
                    if not updated and not ScheduledMessage.objects.filter(id__in=ids).exists():
                        continue  # no row (yet): keep the message
                    marked += updated
                    reader.ack(message)
            # closing the reader's channel hands back everything left unacked
    if marked:
        log.warning("marked %d unroutable message(s) failed", marked)
    return marked

"""The relay's side of the process's publisher thread (rabbit/gather.py): the rows of concurrent
requests in one confirmed batch, on one connection and channel kept open, with rows due in the same
second to the same endpoint in one envelope across requests (DELAY_RELAY_GATHER_MS;
docs/concepts/envelopes.md). A request hands over its rows as a :class:`Part` — rows written
``published`` before their commit (:class:`Claimed`, claims.py) or locked pending rows (relay.py)
— and waits for their confirms. Apart from the relay's own batches because it runs in another
thread and does no database work: each request's rows are marked in its own thread and
transaction, from what this says became of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connections
from django.utils import timezone

from rabbit import BrokerUnavailable, Outgoing
from rabbit.gather import Gatherer
from scheduling.config.conf import broker, conf
from scheduling.core.clock import to_epoch_ms
from scheduling.messages import wire
from scheduling.messages.batches import relay_prepare
from scheduling.models import ScheduledMessage
from scheduling.observability import metrics, tracing


@dataclass
class Claimed:
    """New rows written as published, and what to publish for them once they are committed
    (claims.py): handed over in a :class:`Part`."""

    rows: list[ScheduledMessage]
    groups: list[list[ScheduledMessage]]
    prepared: list
    published_at: object
    token: int | None = None  # the publisher thread expects them (rabbit/gather.py)


@dataclass(eq=False)
class Part:
    """One caller's rows handed to the process's publisher, and what became of them: ``claimed``
    ones (written published, their routes fixed) or locked pending ``rows`` (routed here)."""

    claimed: Claimed | None = None
    rows: list[ScheduledMessage] | None = None
    published: list[ScheduledMessage] = field(default_factory=list)
    failed: list[ScheduledMessage] = field(default_factory=list)  # each with last_error
    unbuilt: list[ScheduledMessage] = field(default_factory=list)  # no message could be built: each with its reason
    errors: list[str] = field(default_factory=list)
    unavailable: str | None = None  # no broker could be reached: nothing was sent
    published_at: object = None  # the rows' publish time (for ``rows``: the batch's)

    @property
    def size(self) -> int:
        return len(self.claimed.rows) if self.claimed else len(self.rows or ())


@dataclass(eq=False)
class _Unit:
    """One broker message of a gathered batch and the rows it carries, by the part they came from."""

    shares: list[tuple[Part, list[ScheduledMessage]]]
    out: Outgoing
    route: object


def _merged(entries: list, margin_ms: int) -> _Unit:
    """One envelope of groups of several parts that share an envelope key and a route. It is built
    at the claim time of the part holding the earliest message, so its route is the one every row
    recorded; its publish time is the latest of theirs (the unroutable drain leaves alone a row
    published after a copy's time)."""
    if len(entries) == 1:
        part, group, out, route = entries[0]
        return _Unit([(part, group)], out, route)
    rows = [row for _, group, _, _ in entries for row in group]
    owner, *_ = min(entries, key=lambda e: min(row.due_at_ms for row in e[1]))
    out, route = wire.outgoing_envelope(rows, rows[0].topology.cascade, owner.claimed.published_at,
                                        margin_ms=margin_ms)
    out.headers[wire.H_PUBLISHED_AT_MS] = max(to_epoch_ms(part.claimed.published_at) for part, *_ in entries)
    return _Unit([(part, group) for part, group, _, _ in entries], out, route)


def _units(parts: list[Part], now) -> list[_Unit]:
    """The broker messages of a gathered batch. Claimed groups that share an envelope key and the
    route their rows recorded become one envelope (at most DELAY_PUBLISH_BATCH rows); pending rows
    are grouped together, across parts, as one relay batch."""
    settings = conf()
    units: list[_Unit] = []
    merging: dict[tuple, list[list]] = {}
    for part in parts:
        if part.claimed is None:
            continue
        for group, (out, route) in zip(part.claimed.groups, part.claimed.prepared, strict=True):
            key = (wire.envelope_key(group[0], group[0].topology.cascade)
                   if settings.envelopes and not wire.is_event_group(group) else None)
            if key is None:  # alone: a row, or an event copy (its rows are one request's)
                units.append(_Unit([(part, group)], out, route))
                continue
            chunks = merging.setdefault((key, route), [[]])
            if chunks[-1] and sum(len(e[1]) for e in chunks[-1]) + len(group) > settings.publish_batch:
                chunks.append([])
            chunks[-1].append((part, group, out, route))
    for (_, route), chunks in merging.items():
        for entries in chunks:
            unit = _merged(entries, settings.arrival_margin_ms)
            if unit.route == route:
                units.append(unit)
            else:  # cannot happen (the rows' recorded route is the envelope's); never contradict them
                units += [_Unit([(part, group)], out, r) for part, group, out, r in entries]
    owners = {id(row): part for part in parts if part.rows for row in part.rows}
    if owners:
        rows = [row for part in parts if part.rows for row in part.rows]
        batch = relay_prepare(rows=rows, now=now, direct=False)
        for row in batch.unbuilt:  # its caller fails it, in its own transaction
            owners[id(row)].unbuilt.append(row)
        for group, (out, route) in zip(batch.groups, batch.prepared, strict=True):
            shares: dict[int, tuple[Part, list]] = {}
            for row in group:
                part = owners[id(row)]
                shares.setdefault(id(part), (part, []))[1].append(row)
            units.append(_Unit(list(shares.values()), out, route))
    return units


def _publish_units(units: list[_Unit]) -> tuple[dict[int, str], list[str]]:
    """Publish, and once more at once on a new connection what a connection broken under it did
    not take (a cluster node lost: open_connection goes on to a live node; left to the sweeper,
    they would be seconds late). Returns the failed units (index -> reason) and the
    errors; BrokerUnavailable when no broker could be reached at first."""
    window = conf().publish_window
    outs = [unit.out for unit in units]
    outcome = broker().publish(outs, window=window)
    failed, errors = dict(outcome.failed), []
    if outcome.error:
        errors.append(outcome.error)
        again = sorted(failed)
        try:
            retried = broker().publish([outs[i] for i in again], window=window) if again else None
        except BrokerUnavailable as exc:
            errors.append(str(exc))
            retried = None
        if retried is not None:
            failed = {i: retried.failed.get(j, "unknown") for j, i in enumerate(again) if j not in retried.confirmed}
            if retried.error:
                errors.append(retried.error)
    return failed, errors


def _send_gathered(parts: list[Part]) -> None:
    """The publisher thread's work for one batch: build, publish, say what became of each part's
    rows. No database work here (it stays in each caller's transaction)."""
    try:
        now = timezone.now()
        units = _units(parts, now)
        try:
            failed, errors = _publish_units(units) if units else ({}, [])
        except BrokerUnavailable as exc:
            for part in parts:
                part.unavailable = str(exc)
                part.errors.append(str(exc))
            metrics.relay_outcome([], [row for unit in units for _, rows in unit.shares for row in rows])
            return
        published, unsent, carriers = [], [], []
        for index, unit in enumerate(units):
            if index in failed:
                for part, rows in unit.shares:
                    for row in rows:
                        row.last_error = f"publish failed: {failed[index]}"
                    part.failed += rows
                    unsent += rows
                continue
            carriers.append(unit.shares[0][1][0])
            for part, rows in unit.shares:
                if part.claimed is None:  # routed here: the caller records the route
                    for row in rows:
                        row.routing_key, row.first_exchange = unit.route.routing_key, unit.route.exchange
                part.published += rows
                published += rows
        for part in parts:
            part.errors += errors
            part.published_at = part.claimed.published_at if part.claimed else now
        metrics.relay_outcome(published, unsent, carriers)
        if tracing.ENABLED:
            tracing.publish_end(published, "published")
    finally:
        connections.close_all()  # none should have been opened in this thread; never leave one behind


# Longer than a batch can take: two publishes (the retry) of up to 30 s of confirms and the connects.
_GATHER_WAIT_SECONDS = 120.0
GATHERER = Gatherer(_send_gathered, gather_ms=lambda: conf().relay_gather_ms, enough=lambda: conf().publish_batch,
                    name="relay")


def relay_gather(*, part: Part) -> Part:
    """Hand ``part`` to this process's publisher thread and wait until its rows are published."""
    return GATHERER.run(part, weight=part.size, timeout=_GATHER_WAIT_SECONDS,
                        token=part.claimed.token if part.claimed else None)


def relay_gather_stats() -> tuple[int, int]:
    """(batches, parts) this process's publisher thread has sent: parts per batch is how many
    callers' rows went together."""
    return GATHERER.batches, GATHERER.items


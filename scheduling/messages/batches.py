"""A relay batch as the broker messages that carry it: its rows grouped (an event's rows in one
event copy, rows of one envelope key in one envelope, every other row alone) and each group built
(wire.py). Every publishing path builds through here — the relay's own batches (relay.py), the rows
written ``published`` before their commit (claims.py) and the pending rows gathered across requests
(gathering.py) — so a batch is grouped the same way whichever path publishes it. No database and no
broker: the caller locks, publishes and marks."""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.config.conf import conf
from scheduling.messages import wire
from scheduling.models import ScheduledMessage
from scheduling.observability import tracing


def _envelopes(rows: list[ScheduledMessage], versions: dict, *, direct: bool, enabled: bool) -> list[list[ScheduledMessage]]:
    """The rows of a batch as broker messages: the rows of one event share one event copy
    (wire.event_key; docs/concepts/fan-out.md), then rows of one wire.envelope_key share an
    envelope (when DELAY_ENVELOPES is on and the publish goes through a cascade); every other row
    goes alone. An event's lone row in the batch is an ordinary row (it may share an envelope)."""
    if direct or not enabled:
        return [[row] for row in rows]
    events: dict[object, list[ScheduledMessage]] = {}
    for row in rows:
        key = wire.event_key(row, versions[row.topology_id])
        if key is not None:
            events.setdefault(key, []).append(row)
    size = conf().publish_batch  # a copy carries at most a batch: its fan-out is one transaction and one publish
    copies = [group[start:start + size] for group in events.values() if len(group) > 1
              for start in range(0, len(group), size)]
    in_copies = {id(row) for group in copies for row in group}
    groups: dict[object, list[ScheduledMessage]] = {}
    for row in rows:
        if id(row) in in_copies:
            continue
        key = wire.envelope_key(row, versions[row.topology_id])
        groups.setdefault(key if key is not None else ("alone", row.id), []).append(row)
    return copies + list(groups.values())


def _build(group: list[ScheduledMessage], version, now, *, margin_ms: int, direct: bool):
    """A group's broker message: a row alone, an event copy, or an envelope."""
    if len(group) == 1:
        return wire.outgoing(group[0], version, now, margin_ms=margin_ms, direct=direct)
    if wire.is_event_group(group):
        return wire.outgoing_event(group, version, now, margin_ms=margin_ms)
    return wire.outgoing_envelope(group, version, now, margin_ms=margin_ms)


@dataclass
class Prepared:
    """A batch's broker messages: the rows grouped (envelopes), each group's (Outgoing, Route), and
    the rows no message could be built of (each with its reason in ``last_error``), left out."""

    groups: list[list[ScheduledMessage]]
    prepared: list
    unbuilt: list[ScheduledMessage]


def relay_prepare(*, rows: list[ScheduledMessage], now, direct: bool) -> Prepared:
    """Build a batch. A row that cannot be built is set aside alone (the caller fails it), never
    the batch: one bad row must not hold back every team's messages on every run."""
    settings = conf()
    if tracing.ENABLED:  # each traced row's broker message names its publish span
        tracing.publish_prepare(rows)
    versions = {row.topology_id: row.topology.cascade for row in rows}  # built once per batch
    batch = Prepared([], [], [])
    for group in _envelopes(rows, versions, direct=direct, enabled=settings.envelopes):
        version = versions[group[0].topology_id]
        try:
            built = _build(group, version, now, margin_ms=settings.arrival_margin_ms, direct=direct)
        except wire.Unbuildable as exc:
            for row in group:
                row.last_error = str(exc)
            batch.unbuilt += group
            continue
        batch.groups.append(group)
        batch.prepared.append(built)
    return batch

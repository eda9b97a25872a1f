"""The relay: publish pending rows into the cascade, with confirms, exactly once per row.

Rows are locked (``FOR UPDATE SKIP LOCKED``) while their batch is published and marked
``published`` in the same transaction, so two publishers never publish the same row and a
retried one finds nothing left to do. The one window left — the broker confirmed but the
commit did not happen — yields a duplicate in the broker, which the consumer suppresses.

Who publishes: the process that scheduled the rows, right after their commit
(:func:`relay_publish_rows`: the API, the admin, Python callers), with the rows it already
holds; and the sweeper, every few seconds, whatever is still pending (the broker was down,
the process died). A worker hop per request cost a task message, a second read of every row
and a second process's CPU (docs/operations/performance.md).

After a commit, a request hands its rows to its process's publisher thread (rabbit/gather.py)
and waits for their confirms: the rows of requests committed meanwhile go in the same confirmed
batch, on one connection and channel kept open, and rows due in the same second to the same
endpoint share an envelope across requests (DELAY_RELAY_GATHER_MS; docs/concepts/envelopes.md).
The database work stays in each request's own thread and transaction: the publisher thread only
builds and publishes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import DatabaseError, connections, transaction
from django.utils import timezone

from rabbit import BrokerUnavailable, Outgoing
from rabbit.gather import Gatherer, GatherTimeout
from scheduling.config.conf import broker, conf
from scheduling.core import lifecycle
from scheduling.core.clock import to_epoch_ms
from scheduling.core.lifecycle import Event, Status
from scheduling.messages import wire
from scheduling.messages.expiry import message_expire_past
from scheduling.messages.rescue import message_rescue_covers
from scheduling.messages.selectors import message_load_task_payloads
from scheduling.messages.unroutable import message_mark_unbuildable
from scheduling.models import DeliveryMode, ScheduledMessage
from scheduling.observability import metrics, tracing

log = logging.getLogger(__name__)


@dataclass
class RelayResult:
    published: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    broken: bool = False  # a connection broke mid-batch (its node lost): another node may take it
    unbuildable: int = 0  # rows no broker message could be made of: failed alone, with the reason


PUBLISHED = lifecycle.transition(Status.PENDING, Event.PUBLISH)


def message_mark_published(*, rows: list[ScheduledMessage], published_at, topology=None) -> int:
    """Record confirmed publishes (each row's routing_key and first_exchange set): the
    lifecycle's ``publish``, on the rows still waiting (one delivered meanwhile stays so)."""
    return ScheduledMessage.objects.set_published(
        rows, status=PUBLISHED, published_at=published_at, from_statuses=lifecycle.sources(Event.PUBLISH),
        topology=topology,
    )


def _fail_unbuilt(rows: list[ScheduledMessage], result: RelayResult) -> None:
    """Fail, alone and with the reason each carries, the locked rows no message could be built of."""
    if rows:
        result.unbuildable += message_mark_unbuildable(rows=rows)


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


def _prepare(rows: list[ScheduledMessage], now, *, direct: bool) -> Prepared:
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


def _send(groups, prepared, rows, result: RelayResult) -> tuple[list, list] | None:
    """Publish the prepared broker messages: (published rows, failed rows), routes set on the
    published ones; None if no broker could be reached (the rows' last_error says why)."""
    try:
        outcome = broker().publish([out for out, _ in prepared], window=conf().publish_window)
    except BrokerUnavailable as exc:
        reason = str(exc)
        ScheduledMessage.objects.filter(id__in=[r.id for r in rows]).update(last_error=reason)
        metrics.relay_outcome([], rows)
        result.failed += len(rows)
        result.errors.append(reason)
        return None
    if outcome.error:
        result.errors.append(outcome.error)
        result.broken = True
    published, failed = [], []
    carriers = [group[0] for index, group in enumerate(groups) if index in outcome.confirmed]
    for index, (group, (_, route)) in enumerate(zip(groups, prepared, strict=True)):
        for row in group:
            if index in outcome.confirmed:
                row.routing_key, row.first_exchange = route.routing_key, route.exchange
                published.append(row)
            else:
                row.last_error = f"publish failed: {outcome.failed.get(index, 'unknown')}"
                failed.append(row)
    metrics.relay_outcome(published, failed, carriers)
    if tracing.ENABLED:  # a publish span per confirmed row (a failed one's next try makes its own)
        tracing.publish_end(published, "published")
    result.published += len(published)
    result.failed += len(failed)
    return published, failed


def _send_retrying(groups, prepared, rows, result: RelayResult) -> tuple[list, list] | None:
    """_send, and once more at once, on a new connection, for the broker messages whose connection
    broke under them (a cluster node lost: open_connection goes on to a live node): left to the
    sweeper, they would be seconds late. Every publishing path goes through here."""
    result.broken = False
    sent = _send(groups, prepared, rows, result)
    if sent is None or not sent[1] or not result.broken:
        return sent
    failed = {row.id for row in sent[1]}
    again = [index for index, group in enumerate(groups) if group[0].id in failed]
    result.failed -= len(sent[1])
    retried = _send([groups[i] for i in again], [prepared[i] for i in again], sent[1], result)
    return sent if retried is None else (sent[0] + retried[0], retried[1])


def _publish_batch(rows: list[ScheduledMessage], result: RelayResult, direct: bool, gather: bool = False) -> None:
    """Publish locked rows and mark those the broker confirmed, in the caller's transaction:
    here, or (``gather``) by the process's publisher thread with other callers' rows. Rows past
    their expires_at are expired instead (messages/expiry.py)."""
    # never published (their copy would be dropped); what they tell is published as any row
    rows = message_expire_past(rows=rows, now=timezone.now(), publish=relay_publish_rows)
    if not rows:
        return
    if gather:
        sent = _gathered_rows(rows, result)
        if sent is None:
            return
        published, failed, now = sent
    else:
        now = timezone.now()
        batch = _prepare(rows, now, direct=direct)
        _fail_unbuilt(batch.unbuilt, result)
        sendable = [row for group in batch.groups for row in group]
        if not sendable:
            return
        sent = _send_retrying(batch.groups, batch.prepared, sendable, result)
        if sent is None:
            return
        published, failed = sent
    message_mark_published(rows=published, published_at=now)
    for row in published:  # the caller's objects say what the database now says
        row.status, row.published_at = PUBLISHED, now
    if failed:
        ScheduledMessage.objects.bulk_update(failed, ["last_error"])


def _gathered_rows(rows: list[ScheduledMessage], result: RelayResult) -> tuple[list, list, object] | None:
    """Locked pending rows through the publisher thread: (published, failed, publish time), or None
    when nothing was sent (no broker: the rows' last_error says why)."""
    for row in rows:  # what building their messages reads, loaded here: the publisher thread reads no database
        row.topology.cascade, row.endpoint.queue  # noqa: B018
    try:
        part = _gathered(_Part(rows=rows))
    except Exception as exc:  # noqa: BLE001 (not marked: they stay pending for the sweeper)
        log.warning("publishing after commit failed (%s); the sweeper will publish", exc,
                    exc_info=not isinstance(exc, GatherTimeout))
        result.failed += len(rows)
        result.errors.append(str(exc))
        return None
    result.errors += part.errors
    result.broken = bool(part.errors)
    _fail_unbuilt(part.unbuilt, result)
    if part.unavailable:
        unbuilt = {row.id for row in part.unbuilt}
        rows = [row for row in rows if row.id not in unbuilt]
        ScheduledMessage.objects.filter(id__in=[r.id for r in rows]).update(last_error=part.unavailable)
        result.failed += len(rows)
        return None
    result.published += len(part.published)
    result.failed += len(part.failed)
    return part.published, part.failed, part.published_at


@dataclass
class Claimed:
    """New rows written as published, and what to publish for them once they are committed."""

    rows: list[ScheduledMessage]
    groups: list[list[ScheduledMessage]]
    prepared: list
    published_at: object
    token: int | None = None  # the publisher thread expects them (rabbit/gather.py)


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
    batch = _prepare(eligible, now, direct=False)
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
    return Claimed(claimed, batch.groups, batch.prepared, now, _GATHERER.expect())


def relay_send_claimed(*, claimed: Claimed) -> RelayResult:
    """After the commit: publish what relay_claim_new prepared, with the rows other requests of this
    process committed meanwhile (their envelopes merged where their routes agree). Rows the broker
    did not confirm go back to pending for the sweeper (compare-and-set: one cancelled meanwhile
    stays cancelled)."""
    result = RelayResult()
    try:
        try:
            part = _gathered(_Part(claimed=claimed))
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


# --- gathering: the rows of concurrent requests in one confirmed batch (rabbit/gather.py) ----------


@dataclass(eq=False)
class _Part:
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

    shares: list[tuple[_Part, list[ScheduledMessage]]]
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


def _units(parts: list[_Part], now) -> list[_Unit]:
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
        batch = _prepare(rows, now, direct=False)
        for row in batch.unbuilt:  # its caller fails it, in its own transaction
            owners[id(row)].unbuilt.append(row)
        for group, (out, route) in zip(batch.groups, batch.prepared, strict=True):
            shares: dict[int, tuple[_Part, list]] = {}
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


def _send_gathered(parts: list[_Part]) -> None:
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
_GATHERER = Gatherer(_send_gathered, gather_ms=lambda: conf().relay_gather_ms, enough=lambda: conf().publish_batch,
                     name="relay")


def _gathered(part: _Part) -> _Part:
    """Hand ``part`` to this process's publisher thread and wait until its rows are published."""
    return _GATHERER.run(part, weight=part.size, timeout=_GATHER_WAIT_SECONDS,
                         token=part.claimed.token if part.claimed else None)


def relay_gather_stats() -> tuple[int, int]:
    """(batches, parts) this process's publisher thread has sent: parts per batch is how many
    callers' rows went together."""
    return _GATHERER.batches, _GATHERER.items


def _relay(select, *, direct: bool, limit_ids: int | None = None) -> RelayResult:
    """Lock a batch of pending rows (SKIP LOCKED), publish, mark, commit; until none is left."""
    result = RelayResult()
    while True:
        with transaction.atomic():
            qs = (
                ScheduledMessage.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("endpoint", "topology")
                # only what a publish needs: decoding payloads cost ~0.1 ms a row
                .only(*wire.PUBLISH_FIELDS)
                .filter(status=Status.PENDING)
            )
            rows = list(select(qs).order_by("due_at")[: conf().publish_batch])
            if not rows:
                return result
            message_load_task_payloads(rows=rows)
            _publish_batch(rows, result, direct)
        if limit_ids is not None and len(rows) >= limit_ids:
            return result
        if result.failed:  # do not loop on rows that just failed; the sweeper tries again
            return result


class PublishPause:
    """After the broker refused, publishing right after commit (and the rescue) waits a sweep
    period: every request would otherwise pay for a failing connection, and the sweeper takes the
    rows. One per process (``publish_pause``), owned by the relay."""

    def __init__(self) -> None:
        self.until = 0.0  # time.monotonic() before which nothing is published at commit

    def held(self) -> bool:
        return time.monotonic() < self.until

    def hold(self) -> None:
        """The broker refused just now: hold publishing for a sweep period."""
        self.until = time.monotonic() + conf().sweep_seconds


publish_pause = PublishPause()


def relay_publish_rows(*, rows: list[ScheduledMessage]) -> RelayResult:
    """Publish rows this process has just committed (native ones), without reading them back:
    lock them by id (the sweeper may hold some: SKIP LOCKED), publish, mark, commit. Whatever
    cannot be published now stays pending for the sweeper; nothing raises to the caller."""
    result = RelayResult()
    rows = [row for row in rows if row.delivery_mode == DeliveryMode.NATIVE]
    if not rows:
        return result
    if publish_pause.held():
        log.warning("broker unavailable lately; %d message(s) stay pending for the sweeper", len(rows))
        return result
    size = conf().publish_batch
    try:
        for start in range(0, len(rows), size):
            chunk = rows[start:start + size]
            with transaction.atomic():
                locked = ScheduledMessage.objects.lock_ids([row.id for row in chunk], status=Status.PENDING)
                _publish_batch([row for row in chunk if row.id in locked], result, direct=False, gather=True)
            if result.failed:
                break
    except DatabaseError as exc:
        log.warning("publishing after commit failed (%s); the sweeper will publish", exc)
    if result.failed:
        publish_pause.hold()
        log.warning("relay not reached (%s); %d message(s) stay pending for the sweeper",
                    result.errors[0] if result.errors else "publish failed", len(rows) - result.published)
    return result


def relay_publish(*, ids: list[str] | None = None, older_than: timedelta | None = None) -> RelayResult:
    """Publish native rows into their cascade: the given ids, or (sweeper) every row pending
    for ``older_than``."""

    def select(qs):
        qs = qs.filter(delivery_mode=DeliveryMode.NATIVE)
        if ids is not None:
            qs = qs.filter(id__in=ids)
        if older_than is not None:
            qs = qs.filter(created_at__lte=timezone.now() - older_than)
        return qs

    return _relay(select, direct=False, limit_ids=len(ids) if ids is not None else None)


def relay_sweep() -> RelayResult:
    """Publish what the on-commit kick missed (broker down, worker died)."""
    result = relay_publish(older_than=timedelta(seconds=conf().sweep_grace_seconds))
    if result.published or result.failed or result.unbuildable:
        log.info("sweeper: published %d, failed %d, unbuildable %d %s", result.published, result.failed,
                 result.unbuildable, result.errors[:1])
    return result


def timeout_publish_due() -> RelayResult:
    """The timeout manager: rows of timeout-manager endpoints wait in the database and are
    published straight to their endpoint's queue shortly before they are due (the worker's
    timer holds the rest). SKIP LOCKED lets any number of these run at once without two ever
    publishing the same row."""
    horizon = timezone.now() + timedelta(milliseconds=conf().timeouts_lookahead_ms)
    result = _relay(
        lambda qs: qs.filter(delivery_mode=DeliveryMode.TIMEOUT_MANAGER, due_at__lte=horizon), direct=True
    )
    if result.published or result.failed or result.unbuildable:  # like the sweeper: a line only for a run that did something
        log.info("timeout manager: published %d, failed %d, unbuildable %d %s", result.published, result.failed,
                 result.unbuildable, result.errors[:1])
    return result

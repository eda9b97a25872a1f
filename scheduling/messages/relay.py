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

After a commit, a request hands its rows to its process's publisher thread (gathering.py,
rabbit/gather.py) and waits for their confirms: the rows of requests committed meanwhile go in the
same confirmed batch, on one connection and channel kept open, and rows due in the same second to
the same endpoint share an envelope across requests (DELAY_RELAY_GATHER_MS;
docs/concepts/envelopes.md). The database work stays in each request's own thread and transaction:
the publisher thread only builds and publishes.

Beside it: batches.py builds a batch's broker messages for every path, and claims.py writes new
rows ``published`` before their commit and sends them after it (what the broker did not confirm
goes back to pending, for the sweeper here).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import DatabaseError, transaction
from django.utils import timezone

from rabbit import BrokerUnavailable
from rabbit.gather import GatherTimeout
from scheduling.config.conf import broker, conf
from scheduling.core import lifecycle
from scheduling.core.lifecycle import Event, Status
from scheduling.messages import wire
from scheduling.messages.batches import relay_prepare
from scheduling.messages.expiry import message_expire_past
from scheduling.messages.gathering import Part, relay_gather
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
        batch = relay_prepare(rows=rows, now=now, direct=direct)
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
        part = relay_gather(part=Part(rows=rows))
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

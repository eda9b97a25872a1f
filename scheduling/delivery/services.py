"""The far end of the cascade: record a delivery once, suppress duplicates, run the handler.

Two paths, the same rules (scheduling/core/lifecycle.py). The common case, a copy due and in flight
for a record-only endpoint (handler "none"), is recorded set-based: one statement per batch
(ScheduledMessageQuerySet.deliver_in_flight, a compare-and-set UPDATE that also adds the
per-minute figures) with no lock query first. Everything else -- duplicates, cancelled,
superseded and early copies, unknown ids (set aside by the caller: orphans.py), endpoints with a
handler -- goes through the one-by-one path, only when the batch has any: one transaction with
the rows locked, so a duplicate arriving at the same moment waits and then sees the first one's
outcome. ``deliver`` is recorded on the row *before* its handler runs, so a second copy of the
same message -- in another batch or in this one -- is a duplicate and the handler runs once per
message id and attempt.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import transaction
from django.utils import timezone

from scheduling.config.conf import conf
from scheduling.core import backoff, lifecycle
from scheduling.core.lifecycle import Arrival, Event
from scheduling.core.ordering import Turn
from scheduling.db.sql import CANONICAL_UUID
from scheduling.delivery.flow_slots import endpoint_key_try_call_slot, endpoint_try_call_slot
from scheduling.delivery.handlers import TaskSends, handover_traceparent, run_handler, send_celery_tasks
from scheduling.delivery.log import Delivered, delivery_log_on_commit
from scheduling.delivery.minutes import (
    delivery_minute_prune,
    delivery_minute_record,
    delivery_minute_upsert_sql,
)
from scheduling.delivery.overlap import schedule_count_overlap_skipped
from scheduling.messages import wire
from scheduling.messages.ordering import TASK_LEASE_SECONDS as ORDERING_TASK_LEASE_SECONDS
from scheduling.messages.ordering import ordering_end, ordering_hold, ordering_take
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.notifications.services import notification_attempt_failing, notification_emit_ended
from scheduling.observability import metrics

log = logging.getLogger(__name__)


class Result(enum.Enum):
    DELIVERED = "delivered"
    DUPLICATE = "duplicate"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"  # a copy for the due time before a reschedule: dropped
    EXPIRED = "expired"  # past its expires_at (expired now or before): dropped, never handed over
    WAITING = "waiting"  # not its ordering key's turn: acked, the row waits to be woken (messages/ordering.py)
    SKIPPED = "skipped"  # a schedule's run its overlap policy does not send: acked, the row ended skipped
    EARLY = "early"
    RETRY = "retry"
    DEFERRED = "deferred"  # left for the one-by-one path (webhooks)
    BUSY = "busy"  # every call slot of its endpoint (max_concurrent) is taken: nothing recorded, try again soon
    POSTPONED = "postponed"  # the broker did not take its handler task: nothing recorded, try again soon
    FAILED = "failed"
    UNKNOWN = "unknown"  # names no row: nothing recorded; the caller sets the copy aside (delivery/orphans.py)
    MISROUTED = "misrouted"  # names a row of another endpoint than the queue it came from: dropped, counted


class Handover(NamedTuple):
    """A copy the broker handed over, as the loop passes it on to be recorded (delivery_receive_many)
    or its row taken for a call (webhook_calls.webhook_call_take). A plain tuple in this order is
    read as one (``Handover(*item)``)."""

    message_id: str  # the row it names (a copy may name none, or carry no id at all)
    attempt: int  # 0: the copy through the cascade; n: the retry of attempt n
    due_ms: int | None = None  # the due time the copy carries, in ms (None: not stamped)
    throttled_ms: int | None = None  # how long flow control held it back (None: not held)
    queue: str | None = None  # the endpoint queue it came from (None: not known; a row of any endpoint)


@dataclass(frozen=True)
class Outcome:
    """What a copy handed over came to (its Result) and what the loop needs to act on it: the
    attempt it was, a retry's wait, an early copy's due time. Not models/delivery.py's
    AttemptOutcome, which classes a handler attempt's failure."""

    result: Result
    attempt: int = 0
    retry_in: float | None = None
    eta: datetime | None = None


_DROPPED = {Arrival.DUPLICATE: Result.DUPLICATE, Arrival.CANCELLED: Result.CANCELLED,
            Arrival.EXPIRED: Result.EXPIRED, Arrival.SUPERSEDED: Result.SUPERSEDED}
_DELIVERED = Outcome(Result.DELIVERED)
# Handlers whose deliveries are recorded set-based: nothing runs but the record itself.
RECORD_ONLY = (Endpoint.Handler.NONE.value,)


def _handle(message: ScheduledMessage) -> Outcome:
    """Run the handler of a message the lifecycle just delivered; record a failure on the row."""
    try:
        run_handler(message)
    except Exception as exc:
        return _handler_failed(message, f"{type(exc).__name__}: {exc}")
    return Outcome(Result.DELIVERED)


def _handler_failed(message: ScheduledMessage, error: str) -> Outcome:
    settings = conf()
    now = timezone.now()
    wait_s = backoff.exponential(message.attempts + 1, first=settings.handler_backoff_seconds)
    retry_at = now + timedelta(seconds=wait_s)
    event, change = lifecycle.handler_failed(message, error=error, max_retries=settings.handler_max_retries,
                                             now=now, retry_at=retry_at)
    lifecycle.apply(message, change)
    if event is Event.EXPIRE:  # the retry would come after its expires_at: never retried
        return Outcome(Result.EXPIRED)
    if event is Event.GIVE_UP:
        log.error("message %s failed after %d attempts: %s", message.id, message.attempts, error,
                  extra={"traceparent": handover_traceparent(message)})  # its trace ids (delayplatform/logs.py)
        return Outcome(Result.FAILED)
    wait_s = backoff.exponential(message.attempts, first=settings.handler_backoff_seconds)
    return Outcome(Result.RETRY, attempt=message.attempts, retry_in=wait_s)


def _handle_many(to_handle: list[tuple[int, ScheduledMessage]], outcomes: list) -> None:
    """Celery task handlers of the batch in one windowed publish; the others one by one. A task
    the broker did not take now is POSTPONED: a node lost or a task queue's leader being elected
    is the transport's hiccup, not the handler's failure, and the handler's backoff (2, 4, 8 s)
    would make it a 15-s pause after a node loss."""
    tasks = [(i, m) for i, m in to_handle if m.endpoint_handler == Endpoint.Handler.CELERY_TASK]
    try:
        sends = send_celery_tasks([m for _, m in tasks]) if tasks else TaskSends()
    except Exception as exc:  # not the broker's hiccup (that is ``unsent``): every task of the batch failed to send
        sends = TaskSends(refused={n: f"{type(exc).__name__}: {exc}" for n in range(len(tasks))})
    for n, (index, message) in enumerate(tasks):
        if n in sends.unsent:
            outcomes[index] = Outcome(Result.POSTPONED)
        elif n in sends.refused:
            outcomes[index] = _handler_failed(message, f"task not sent: {sends.refused[n]}")
        else:
            outcomes[index] = Outcome(Result.DELIVERED)
    if sends.unsent:
        log.warning("%d handler task(s) not taken by the broker (%s); their deliveries are postponed",
                    len(sends.unsent), next(iter(sends.unsent.values())))
    for index, message in to_handle:
        if message.endpoint_handler == Endpoint.Handler.NONE:
            outcomes[index] = Outcome(Result.DELIVERED)
        elif message.endpoint_handler != Endpoint.Handler.CELERY_TASK:
            outcomes[index] = _handle(message)


def delivery_receive_many(*, items: list[Handover | tuple], defer_webhooks: bool = True,
                          by: str = "", traceparents: dict[str, str] | None = None) -> list[Outcome]:
    """Record a batch of hand-overs: the delivery loop's path, thousands a second where a
    transaction per message managed a few hundred. ``items`` are Handovers (or tuples in its
    order: the id and attempt required), in arrival order; outcomes come back in the same order.
    A copy whose row is not its queue's endpoint's comes back MISROUTED (nothing recorded,
    counted, logged): the loop drops it. A copy naming no row comes back UNKNOWN (nothing recorded):
    the loop sets it aside for the operator (delivery/orphans.py). Webhook messages come back
    DEFERRED (untouched): an HTTP call must not hold the batch's locks, so the caller hands them to
    delivery_receive one by one; there, a webhook whose endpoint has max_concurrent calls in
    flight comes back BUSY (untouched). ``by``: the receiving worker, recorded on each delivery.
    ``traceparents``: message id -> the traceparent its handler (a task, a webhook) is handed.

    One transaction: record-only deliveries due and in flight are taken set-based (one
    statement); the copies it did not take, if any, go through the one-by-one path, which sees
    the rows as the statement left them. A batch that fails rolls back whole and is tried again
    without having counted anything (delivery_count, metrics, the minute figures). Metrics and the
    log count it once committed; the log writes one summary line a batch."""
    items = [Handover(*item) for item in items]
    outcomes: list[Outcome | None] = [None] * len(items)
    with transaction.atomic():
        delivered = _deliver_set_based(items, outcomes, by)
        left = [(index, item) for index, item in enumerate(items) if outcomes[index] is None]
        if left:
            delivered += _receive_one_by_one(left, outcomes, defer_webhooks=defer_webhooks, by=by,
                                             traceparents=traceparents)
        delivery_log_on_commit(messages=delivered, by=by)
    return outcomes


def _deliver_set_based(items: list[Handover], outcomes: list, by: str) -> list[Delivered]:
    """The first copy of each id, if its row is due, in flight for the copy's attempt and due time,
    and record-only, recorded delivered with its minute figures in one statement (compare-and-set:
    no lock query first). Fills ``outcomes`` for the copies taken; the rest stay None."""
    seen, firsts = set(), []
    for index, item in enumerate(items):
        if item.message_id in seen:  # a second copy: the one-by-one path, which sees what the first one did
            continue
        seen.add(item.message_id)
        if isinstance(item.message_id, str) and CANONICAL_UUID(item.message_id):
            firsts.append((index, item))
    if not firsts:
        return []
    rows = ScheduledMessage.objects.deliver_in_flight(
        [item for _, item in firsts], now=timezone.now(), by=by, handlers=RECORD_ONLY,
        counted_by=delivery_minute_upsert_sql(source="taken"))
    delivered, counted, callbacks = [], [], []
    for n, endpoint_id, topology_id, lateness_ms, attempt, throttled_ms, callback in rows:
        index = firsts[n][0]
        if callback:
            callbacks.append(items[index].message_id)
        outcomes[index] = _DELIVERED
        delivered.append(Delivered(items[index].message_id, endpoint_id, topology_id, lateness_ms, attempt))
        if attempt == 0:  # a retry's later attempt is not a new delivery (metrics.arrival)
            counted.append((endpoint_id, topology_id, lateness_ms, throttled_ms))
    metrics.deliveries_on_commit(counted)
    if rows:
        delivery_minute_prune()
    if callbacks:  # only rows with an on_delivered endpoint: a batch without any costs no statement
        notification_emit_ended(delivered=callbacks)
    return delivered


def _receive_one_by_one(left: list[tuple[int, Handover]], outcomes: list, *, defer_webhooks: bool,
                        by: str, traceparents: dict[str, str] | None = None) -> list[ScheduledMessage]:
    """The copies the set-based statement did not take, (index in the batch, item), with their
    rows locked (one lock query, one write; in the caller's transaction); each decided by the
    lifecycle in arrival order. Fills ``outcomes``; returns the messages recorded delivered."""
    rows = {str(m.id): m for m in ScheduledMessage.objects.locked_for_delivery(
        [message_id for message_id in {item.message_id for _, item in left} if wire.is_row_id(message_id)])}
    now = timezone.now()
    changed, to_handle, counted, arrived, misrouted, keyed, expired = {}, [], [], {}, [], {}, []

    def take(index, message_id, attempt, message, arrival, change) -> None:
        if arrival is Arrival.DELIVER and not _call_slot_free(message):
            outcomes[index] = Outcome(Result.BUSY, attempt=attempt)
            return
        before = {name: getattr(message, name) for name in change}  # to undo a postponed one
        lifecycle.apply(message, change)
        changed[message.id] = message
        arrived[index] = (before, metrics.arrival(arrival, message, change))
        if arrival in _DROPPED:
            outcomes[index] = Outcome(_DROPPED[arrival])
        if arrival is Arrival.EXPIRED and change and not message.notification:  # expired by this copy: told once
            expired.append(message.id)
        if arrival is Arrival.DELIVER:
            to_handle.append((index, message))
            if traceparents and (traceparent := traceparents.get(message_id)):
                message.handover_traceparent = traceparent  # handlers.handover_traceparent

    for index, (message_id, attempt, due_ms, throttled_ms, queue) in left:
        message = rows.get(message_id)
        if message is None:
            outcomes[index] = Outcome(Result.UNKNOWN)  # no row: the caller sets the copy aside (orphans.py)
            continue
        if queue is not None and message.endpoint_queue != queue:
            outcomes[index] = Outcome(Result.MISROUTED)
            misrouted.append(delivery_drop_misrouted(message_id=message_id, queue=queue))
            continue
        if lifecycle.superseded(message, attempt=attempt, due_ms=due_ms):
            # before the early check: a copy for the old time must not wait for the new one
            outcomes[index] = Outcome(Result.SUPERSEDED)
            counted.append(metrics.arrival(Arrival.SUPERSEDED, message, {}))
            continue
        if defer_webhooks and message.endpoint_handler == Endpoint.Handler.WEBHOOK:
            outcomes[index] = Outcome(Result.DEFERRED, attempt=attempt)
            continue
        if now < message.due_at:  # never early: hold it until due
            outcomes[index] = Outcome(Result.EARLY, attempt=attempt, eta=message.due_at)
            continue
        arrival, change = lifecycle.arrive(message, attempt=attempt, now=now, by=by, throttled_ms=throttled_ms)
        if arrival is Arrival.DELIVER and message.ordering_key is not None:
            if message.id in keyed:  # a second copy in this batch: the first one is decided
                arrival, change = Arrival.DUPLICATE, {}
            else:  # its turn is decided for the batch's keyed ones together, below
                keyed[message.id] = (index, message_id, attempt, message, change)
                continue
        take(index, message_id, attempt, message, arrival, change)
    if keyed:
        counted += _take_turns(keyed, take, outcomes, changed, now)
    with_handlers = [m for _, m in to_handle if m.endpoint_handler != Endpoint.Handler.NONE]
    if with_handlers:  # what a handler reads: its endpoint and the payload
        data = ScheduledMessage.objects.handler_data([m.id for m in with_handlers])
        for message in with_handlers:
            message.payload, message.endpoint = data[message.id]
    _handle_many(to_handle, outcomes)
    # postponed: the row stays as it was and the message is held for another try (a second copy
    # of it in this batch was already dropped as a duplicate; its count goes with the undo)
    for index, message in to_handle:
        if outcomes[index].result is Result.POSTPONED:
            before, _ = arrived.pop(index)
            for name, value in before.items():
                setattr(message, name, value)
            del changed[message.id]
    counted += [count for _, count in arrived.values()]
    for index, message in to_handle:
        if outcomes[index].result in (Result.RETRY, Result.FAILED, Result.EXPIRED):
            counted += metrics.handler_failed(message, retried=outcomes[index].result is Result.RETRY)
        if outcomes[index].result is Result.EXPIRED:
            counted.append(metrics.Counted(metrics.EXPIRED, message))
    ScheduledMessage.objects.save_delivery_state(list(changed.values()))
    tasks = [m for index, m in to_handle if m.ordering_key is not None and outcomes[index].result is Result.DELIVERED
             and m.endpoint_handler == Endpoint.Handler.CELERY_TASK]
    if tasks:  # sent: their keys are held until their workers report their ends (celery/claim.py) or the lease
        until = now + timedelta(seconds=ORDERING_TASK_LEASE_SECONDS)
        ordering_hold(held=[(m.endpoint_id, m.ordering_key, str(m.id), until) for m in tasks])
    ended = {(m.endpoint_id, m.ordering_key) for m in changed.values()
             if m.ordering_key is not None and m.status in lifecycle.FINISHED and m not in tasks}
    if ended:  # a keyed message ended here (delivered, failed, expired): the next of its key is woken
        ordering_end(keys=ended)
    delivered = [m for index, m in to_handle if outcomes[index].result is Result.DELIVERED]
    _tell(to_handle, outcomes, expired)
    delivery_minute_record(messages=delivered)
    metrics.record_on_commit(counted)
    if misrouted:
        transaction.on_commit(lambda: metrics.misrouted(misrouted))
    return delivered


def _take_turns(keyed: dict, take, outcomes: list, changed: dict, now: datetime) -> list:
    """The keyed copies that would be delivered: those whose ordering key's turn it is are taken as
    any other (``take``), in the key's order; the others are acked and their rows set waiting (a
    waiting row's stray copy leaves it waiting), or, a schedule's run its overlap policy does not send,
    skipped (ended, with the reason). Returns what the waits and skips count."""
    # a record-only message ends at its hand-over: the next of its key in this batch goes too; a
    # handler's (a Celery task's, a webhook run here) ends later: one of a key at a time
    turns = ordering_take(candidates=[m for *_, m, _ in keyed.values()], now=now,
                          chain=lambda m: m.endpoint_handler == Endpoint.Handler.NONE)
    counted, skipped = [], []
    for index, message_id, attempt, message, change in keyed.values():
        decision = turns[str(message.id)]
        if decision.turn is Turn.GO:
            take(index, message_id, attempt, message, Arrival.DELIVER, change)
            continue
        outcomes[index] = Outcome(Result.WAITING if decision.turn is Turn.WAIT else Result.SKIPPED, attempt=attempt)
        if decision.turn is Turn.SKIP:
            lifecycle.apply(message, lifecycle.skip(message, now=now, reason=decision.reason))
            changed[message.id] = message
            skipped.append(message)
        elif message.status != lifecycle.Status.WAITING:
            lifecycle.apply(message, lifecycle.wait(message, now=now))
            changed[message.id] = message
            counted.append(metrics.Counted(metrics.ORDERING_WAITS, message))
    if skipped:
        counted += schedule_count_overlap_skipped(runs=skipped)
    return counted


def _tell(handled: list[tuple[int, ScheduledMessage]], outcomes: list, expired: list) -> None:
    """The outcomes the notifications tell (one statement for the batch, none when nothing is to
    be told): a handler that gave up, its ATTEMPT_FAILING_AT-th failure in a row followed by a
    retry (one that gives up then says message.failed), a delivery with an on_delivered endpoint,
    a message expired (``expired``: by its copy's arrival; or its handler failed and the retry
    would come too late). A notification or callback message tells nothing."""
    delivered, failed, failing, expired = [], [], [], list(expired)
    for index, message in handled:
        if message.notification:
            continue
        result = outcomes[index].result
        if result is Result.DELIVERED and message.on_delivered_id is not None:
            delivered.append(message.id)
        elif result is Result.FAILED:
            failed.append(message.id)
        elif result is Result.EXPIRED:
            expired.append(message.id)
        elif result is Result.RETRY and notification_attempt_failing(attempts=message.attempts):
            failing.append(message.id)
    notification_emit_ended(delivered=delivered, failed=failed, failing=failing, expired=expired)


def delivery_drop_misrouted(*, message_id: str, queue: str) -> str:
    """Say that a copy naming ``message_id`` came from ``queue``, which is not its endpoint's: a
    message someone else put there (a team's broker user can publish into its own queues) or a
    misplaced one. It is dropped (acked, never delivered nor handed back); the queue is counted.
    Returns the queue, for the count."""
    log.warning("copy of message %s arrived on queue %s, which is not its endpoint's: dropped, not delivered",
                message_id, queue)
    return queue


def _call_slot_free(message: ScheduledMessage) -> bool:
    """A webhook of an endpoint with max_concurrent takes a call slot for its transaction (which
    holds the call): delivery/flow_slots.py. Only the one-by-one path gets here with a webhook: the
    batch path defers them first."""
    if message.endpoint_handler != Endpoint.Handler.WEBHOOK:
        return True
    limit, per_key = message.endpoint_max_concurrent, message.endpoint_max_concurrent_per_key
    # max_concurrent_per_key: its flow key's slot first (the column loads here, for these webhooks only)
    if per_key is not None and (key := message.flow_key) and \
            not endpoint_key_try_call_slot(endpoint_id=message.endpoint_id, key=key, concurrent=per_key):
        return False
    return limit is None or endpoint_try_call_slot(endpoint_id=message.endpoint_id, concurrent=limit)


def delivery_receive(*, message_id: str, attempt: int = 0, by: str = "", due_ms: int | None = None,
                     throttled_ms: int | None = None, traceparent: str | None = None) -> Outcome:
    """One hand-over, in its own transaction (webhooks, and the scheduling.deliver task); ``due_ms``
    and ``throttled_ms`` as in delivery_receive_many's items, ``traceparent`` what its handler is handed."""
    return delivery_receive_many(items=[Handover(message_id, attempt, due_ms, throttled_ms)],
                                 defer_webhooks=False,
                                 by=by, traceparents={message_id: traceparent} if traceparent else None)[0]


def delivery_retry_unsent(*, message_id: str, attempt: int) -> bool:
    """The retry message of ``attempt`` was not confirmed by the broker: forget the attempt
    (lifecycle.retry_unsent), so the copy the broker hands back runs the handler again."""
    with transaction.atomic():
        message = ScheduledMessage.objects.select_for_update().filter(id=message_id).first()
        change = lifecycle.retry_unsent(message, attempt=attempt) if message is not None else {}
        if change:
            message.save(update_fields=lifecycle.apply(message, change))
    return bool(change)

"""The far end of the cascade: a thread in each platform worker that consumes every active
endpoint's queue, holds each message until it is due, and records due messages in batches.

Why not one Celery task per message: Celery sends a basic.qos for every eta-held message and
again when it runs, pickles each task to a pool process, and each task paid a transaction of its
own; that managed ~350 deliveries/s on this machine. Here one thread does what a delivery
needs: a timer of held messages (holding.py), one transaction per batch of due ones
(delivery_receive_many), then the acks. The messages are still ``scheduling.deliver`` task
messages, so the task remains a fallback for any worker without this loop.

This module is only the I/O: the broker through ``rabbit.Consumer``, the database through the
delivery service. What a message says (wire.read_delivery), when it is due and how long to back
off (holding.py, backoff.py) and what a hand-over means (lifecycle.py) are pure and tested alone.

Guarantees kept: a message is acked only after its row is committed (a crash redelivers it);
never before due_at (the row is checked too); a database outage leaves messages unacked and
retries them with backoff; webhooks run one by one in a small thread pool so a slow endpoint
cannot hold a batch's locks.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.db import DatabaseError, close_old_connections

import rabbit

from .. import wire
from ..clock import from_epoch_ms, now_ms, to_epoch_ms
from ..conf import broker, conf
from ..observability import metrics
from ..selectors.database import endpoint_get_consumption, endpoint_get_flow_limits
from ..services.delivery import (
    Outcome,
    Result,
    delivery_receive,
    delivery_receive_many,
    delivery_retry_unsent,
)
from ..services.flow import endpoint_take_slots
from ..services.rescue import message_rescue_overdue
from .flow import FlowGate, Limit
from .holding import Held, Holding

log = logging.getLogger(__name__)
LONGEST_WAIT_SECONDS = 0.1  # how often the loop looks at webhooks, endpoint changes and stop


class DeliveryLoop(threading.Thread):
    def __init__(self, worker_name: str = ""):
        super().__init__(name="dp-delivery-loop", daemon=True)
        self.worker_name = worker_name  # the Celery node name, recorded on every delivery
        self.settings = conf()
        self.stopping = threading.Event()
        self.sync_now = threading.Event()
        self.finished: queue.SimpleQueue = queue.SimpleQueue()  # (Held, Outcome | Exception) from webhooks
        self.webhooks = ThreadPoolExecutor(self.settings.webhook_concurrency, thread_name_prefix="dp-webhook")
        self.holding = Holding()
        self.flow = FlowGate()  # endpoints' rate and concurrency limits (flow.py)
        self.consumer: rabbit.Consumer | None = None
        self.unknown_reported: set[str] = set()
        self.beat_at = time.monotonic()  # the last turn of the loop (the worker health check reads it)
        self.in_webhooks: set[str] = set()  # ids handed to the webhook threads, not yet settled
        self.parts: dict[int, int] = {}  # delivery tag of an envelope -> its messages not yet settled
        self.given_back: set[int] = set()  # envelopes rejected whole while a message of theirs was at a webhook

    # --- lifecycle of the thread --------------------------------------------------------------

    def health(self) -> dict:
        """What ``manage.py worker_health`` asks (through the dp_health control command)."""
        consumer = self.consumer
        return {"loop": "running" if self.is_alive() else "stopped",
                "connected": consumer is not None and consumer.conn is not None,
                "idle_seconds": round(time.monotonic() - self.beat_at, 3),
                "consuming": len(consumer.queues) if consumer is not None else 0}

    def stop(self, timeout: float = 10) -> None:
        self.stopping.set()
        self.join(timeout)
        self.webhooks.shutdown(wait=False, cancel_futures=True)

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self._session()
            except rabbit.BrokerUnavailable as exc:
                # a session that ran a while lost its node: reconnect at once (the next node of the
                # URL takes it; the 1 s wait added to every held message's lateness, issue 22);
                # one that could not even start waits 1 s, not to spin against a broker that is down
                if not self.stopping.is_set():
                    log.warning("delivery loop: %s; reconnecting", exc)
                    time.sleep(0.05 if time.monotonic() - started > 5 else 1)
            except Exception:  # never let the thread die silently
                log.exception("delivery loop failed; restarting it")
                time.sleep(1)
            finally:
                self.holding.clear()  # unacked: the broker hands them back on the next connection
                self.parts.clear()
                self.given_back.clear()
                metrics.held(0)

    def _session(self) -> None:
        self.consumer = rabbit.Consumer(broker().url, prefetch=self.settings.delivery_prefetch,
                                        on_message=self._on_message, on_cancel=self._on_cancel)
        with self.consumer.connected():
            next_sync = next_rescue = 0.0
            while not self.stopping.is_set():
                self.beat_at = time.monotonic()
                if self.sync_now.is_set() or time.monotonic() >= next_sync:
                    self.sync_now.clear()
                    self._sync()
                    next_sync = time.monotonic() + self.settings.consumer_sync_seconds
                self._finish_webhooks()
                self._deliver_due()
                if self.settings.rescue_after_ms and time.monotonic() >= next_rescue:
                    self._rescue()
                    next_rescue = time.monotonic() + self.settings.rescue_after_ms / 4000  # 4 looks a rescue
                metrics.held(len(self.holding))
                wait_s = 0.0 if not self.finished.empty() else self.holding.wait_seconds(now_ms(), LONGEST_WAIT_SECONDS)
                self.consumer.wait(max(wait_s, 0.0005), then_take=self.settings.delivery_batch * 4)

    # --- which queues -----------------------------------------------------------------------

    def _sync(self) -> None:
        try:
            close_old_connections()
            wanted = {name for name, active in endpoint_get_consumption().items() if active}
            self.flow.set_limits(endpoint_get_flow_limits())
        except DatabaseError as exc:
            log.warning("endpoint sync skipped: database unavailable (%s)", exc)
            return
        for name in sorted(wanted - self.consumer.queues):
            if self._queue_exists(name):
                self.consumer.consume(name)
                log.info("consuming endpoint queue %s", name)
        for name in sorted(self.consumer.queues - wanted):
            self.consumer.cancel(name)
            released = {held.message.tag: held.message
                        for held in self.holding.release(lambda h, name=name: h.message.queue == name)}
            for tag, message in released.items():  # an envelope goes back once, whole
                if self.parts.pop(tag, None) is not None:
                    self.given_back.add(tag)
                self.consumer.reject(message, requeue=True)  # a paused endpoint's messages go back
            log.info("pausing endpoint queue %s (endpoint inactive or gone)", name)

    def _queue_exists(self, name: str) -> bool:
        if self.consumer.queue_exists(name):
            return True
        if name not in self.unknown_reported:
            log.warning("endpoint queue %s does not exist on the broker; re-bind the endpoint", name)
            self.unknown_reported.add(name)
        return False

    def _on_cancel(self, name: str) -> None:
        log.warning("the broker cancelled consuming %s (queue deleted?)", name)

    # --- messages -----------------------------------------------------------------------------

    def _on_message(self, message: rabbit.Received) -> None:
        deliveries = wire.read_deliveries(message.headers, message.body, now_ms())
        if deliveries is None:  # not ours: keep it unacked (never dropped) and say so
            log.error("endpoint queue %s holds a message that is not a scheduling.deliver task or envelope; "
                      "left unacked", message.queue)
            return
        if len(deliveries) > 1:  # an envelope: acked once every message in it is settled
            self.parts[message.tag] = len(deliveries)
        for delivery in deliveries:
            self.holding.hold(message, delivery)

    def _deliver_due(self) -> None:
        ready = self.holding.due(now_ms(), self.settings.delivery_batch)
        if not ready:
            return
        due = ready
        try:
            now = now_ms()
            due, waiting = self.flow.admit(ready, now, self._take_slots)
            for held, until_ms in waiting:  # over an endpoint's limit: held for its slot
                self.holding.hold_until(held, until_ms)
            if not due:
                return
            outcomes = delivery_receive_many(items=[(h.delivery.message_id, h.delivery.attempt,
                                                     h.delivery.stamped_due_ms, self.flow.throttled_ms(h, now))
                                                    for h in due], by=self.worker_name)
        except DatabaseError as exc:
            close_old_connections()
            for held in due:
                self.flow.done(held)
            waits = [self.holding.database_failed(held, now_ms()) for held in due]
            log.warning("delivery of %d message(s) postponed: database unavailable (%s); retry in %gs, unacked",
                        len(due), exc, min(waits))
            return
        decided = []
        for held, outcome in zip(due, outcomes):
            if outcome.result is Result.DEFERRED:  # a webhook: one by one, each in the call's own transaction
                self.in_webhooks.add(held.delivery.message_id)
                future = self.webhooks.submit(self._call_webhook, held)
                future.add_done_callback(lambda f, h=held: self.finished.put((h, f.exception() or f.result())))
            else:
                self.flow.done(held)
                decided.append((held, outcome))
        self._settle_all(decided)

    @staticmethod
    def _take_slots(limit: Limit, count: int, spacing_us: int, since_ms: int) -> int:
        """The first slot's delay from ``since_ms``: the database's delay counts from its
        statement, which this clock reads after it (the slot is never placed early)."""
        first_us = endpoint_take_slots(limit=limit, count=count, spacing_us=spacing_us)
        return first_us + (now_ms() - since_ms) * 1000

    def _call_webhook(self, held: Held) -> Outcome:
        """In a webhook thread: the hand-over, unless its rate slot went by while it waited for
        the thread (then it goes back for another, flow.py)."""
        now = now_ms()
        if self.flow.late(held, now):
            return Outcome(Result.BUSY, attempt=held.delivery.attempt)
        return delivery_receive(message_id=held.delivery.message_id, attempt=held.delivery.attempt,
                                by=self.worker_name, due_ms=held.delivery.stamped_due_ms,
                                throttled_ms=self.flow.throttled_ms(held, now))

    def _finish_webhooks(self) -> None:
        decided = []
        while not self.finished.empty():
            held, result = self.finished.get()
            self.in_webhooks.discard(held.delivery.message_id)
            self.flow.done(held)
            if isinstance(result, Outcome) and result.result is Result.BUSY:  # flow control: look again soon
                self.holding.hold_until(held, self.flow.back(held, now_ms()))
            elif isinstance(result, DatabaseError):
                self.holding.database_failed(held, now_ms())
            elif isinstance(result, Exception):
                log.error("webhook delivery of %s raised %r; left unacked", held.delivery.message_id, result)
            else:
                decided.append((held, result))
        self._settle_all(decided)

    def _rescue(self) -> None:
        """Messages overdue by DELAY_RESCUE_AFTER_MS that this loop neither holds nor is handing
        over: their copy is stuck in the broker (services/rescue.py). Not while the loop is behind:
        its prefetch full (unacked broker messages, an envelope counting once), or messages ready
        in its hold for half the setting (a copy of each overdue message doubled the work of a
        burst it had not caught up with, and the delivery rate collapsed).
        The copies' confirms are waited for 1 s at most: a queue whose leader is being elected must
        not stop the loop."""
        settings = self.settings
        if len(self.consumer.unsettled) >= settings.delivery_prefetch:
            return
        if self.holding.behind_ms(now_ms()) > settings.rescue_after_ms / 2:
            return  # behind (a burst): what is overdue waits in its hold and its queues
        skip = self.holding.ids_due_before(now_ms() - settings.rescue_after_ms) | self.in_webhooks
        try:
            message_rescue_overdue(queues=self.consumer.queues, skip=skip, limit=settings.delivery_batch,
                                   publish=lambda copies: self.consumer.publish(copies, timeout=1.0))
        except DatabaseError as exc:
            close_old_connections()
            log.warning("overdue check skipped: database unavailable (%s)", exc)

    def _settle_all(self, decided: list[tuple[Held, Outcome]]) -> None:
        """Settle a batch, then ack it in one write (as few frames as AMQP's multiple ack allows).
        If a retry cannot be published the session ends: every retry of the batch not yet sent is
        forgotten on its row first, since its held copy, unacked, comes back and must deliver."""
        settled = []
        for index, (held, outcome) in enumerate(decided):
            try:
                if self._settle(held, outcome) and self._last_part(held):
                    settled.append(held.message)
            except rabbit.BrokerUnavailable:
                for later, later_outcome in decided[index + 1:]:
                    if later_outcome.result is Result.RETRY:
                        delivery_retry_unsent(message_id=later.delivery.message_id, attempt=later_outcome.attempt)
                raise
        self.consumer.ack_many(settled)

    def _last_part(self, held: Held) -> bool:
        """Whether ``held`` was the last unsettled message of its broker message (a lone message
        always is): only then may the broker message be acked."""
        if held.message.tag in self.given_back:  # rejected already: it comes back whole
            return False
        left = self.parts.get(held.message.tag)
        if left is None:
            return True
        if left > 1:
            self.parts[held.message.tag] = left - 1
            return False
        del self.parts[held.message.tag]
        return True

    def _settle(self, held: Held, outcome: Outcome) -> bool:
        """Whether the message is done with (to be acked): not when it came early."""
        if outcome.result is Result.EARLY:  # clocks disagree: wait for the row's due time
            self.holding.hold_until(held, to_epoch_ms(outcome.eta))
            return False
        if outcome.result is Result.POSTPONED:  # the broker did not take its handler task: soon again
            self.holding.broker_failed(held, now_ms())
            return False
        if outcome.result is Result.RETRY:
            self._publish_retry(held, outcome)
        return True

    def _publish_retry(self, held: Held, outcome: Outcome) -> None:
        """The next handler attempt: the same message again, due after the backoff, straight to
        where this one came from (the delivery exchange, or the queue)."""
        eta = from_epoch_ms(now_ms() + int(outcome.retry_in * 1000))
        out = wire.retry(held.message, held.delivery.message_id, outcome.attempt, eta)
        try:
            result = self.consumer.publish([out])
            problem = None if result.confirmed else f"not confirmed: {result.error or result.failed}"
        except rabbit.BrokerUnavailable as exc:
            problem = str(exc)
        if problem is not None:  # the held copy stays unacked and comes back: it must deliver again
            delivery_retry_unsent(message_id=held.delivery.message_id, attempt=outcome.attempt)
            raise rabbit.BrokerUnavailable(f"retry of {held.delivery.message_id}: {problem}")

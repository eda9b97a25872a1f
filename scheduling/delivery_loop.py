"""The far end of the cascade: a thread in each platform worker that consumes every active
endpoint's queue, holds each message until it is due, and records due messages in batches.

Why not one Celery task per message: Celery sends a basic.qos for every eta-held message and
again when it runs, pickles each task to a pool process, and each task paid a transaction of its
own; that managed ~350 deliveries/s on this machine. Here one thread does what a delivery
needs: a heap of held messages, one transaction per batch of due ones (delivery_receive_many),
then the acks. The messages are still ``scheduling.deliver`` task messages, so the task
remains a fallback for any worker without this loop.

Guarantees kept: a message is acked only after its row is committed (a crash redelivers it);
never before due_at (the row is checked too); a database outage leaves messages unacked and
retries them with backoff; webhooks run one by one in a small thread pool so a slow endpoint
cannot hold a batch's locks.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import queue
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

from amqp.exceptions import AMQPError
from django.conf import settings
from django.db import DatabaseError, close_old_connections
from kombu.exceptions import OperationalError

from topology.broker import queue_depth
from topology.publisher import publish_confirmed

from . import broker, selectors, wire
from .models import to_epoch_ms
from .services.delivery import Outcome, Result, delivery_receive, delivery_receive_many

log = logging.getLogger(__name__)
_sequence = itertools.count()


def _now_ms() -> int:
    return to_epoch_ms(datetime.now(timezone.utc))


@dataclass(order=True)
class Held:
    due_ms: int
    seq: int = field(default_factory=lambda: next(_sequence))
    message: object = field(compare=False, default=None)
    message_id: str = field(compare=False, default="")
    attempt: int = field(compare=False, default=0)
    failures: int = field(compare=False, default=0)  # database outages met so far


def read(message) -> Held | None:
    """message id, attempt and due time of a ``scheduling.deliver`` message (None if not one)."""
    headers = message.headers or {}
    if headers.get("task") != wire.DELIVER_TASK:
        return None
    try:
        args, kwargs, _ = json.loads(message.body)
        message_id, attempt = str(args[0]), int(kwargs.get("attempt", 0))
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    due = headers.get(wire.H_DUE_AT_MS)
    if not isinstance(due, int) or isinstance(due, bool):
        eta = headers.get("eta")
        due = to_epoch_ms(datetime.fromisoformat(eta)) if isinstance(eta, str) else _now_ms()
    if attempt and isinstance(headers.get("eta"), str):  # a retry waits for its own eta
        due = max(due, to_epoch_ms(datetime.fromisoformat(headers["eta"])))
    return Held(due, message=message, message_id=message_id, attempt=attempt)


class DeliveryLoop(threading.Thread):
    def __init__(self):
        super().__init__(name="dp-delivery-loop", daemon=True)
        self.stopping = threading.Event()
        self.sync_now = threading.Event()
        self.finished: queue.SimpleQueue = queue.SimpleQueue()  # (Held, Outcome | Exception) from webhooks
        self.webhooks = ThreadPoolExecutor(settings.DELAY_WEBHOOK_CONCURRENCY, thread_name_prefix="dp-webhook")
        self.heap: list[Held] = []
        self.consumers: dict[str, str] = {}  # queue -> consumer tag
        self.unknown_reported: set[str] = set()

    # --- lifecycle ------------------------------------------------------------------------------

    def stop(self, timeout: float = 10) -> None:
        self.stopping.set()
        self.join(timeout)
        self.webhooks.shutdown(wait=False, cancel_futures=True)

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._session()
            except (OSError, AMQPError, OperationalError, broker.BrokerUnavailable) as exc:
                if not self.stopping.is_set():
                    log.warning("delivery loop: broker connection lost (%s); reconnecting", exc)
                    time.sleep(1)
            except Exception:  # never let the thread die silently
                log.exception("delivery loop failed; restarting it")
                time.sleep(1)
            finally:
                self.heap.clear()  # unacked: the broker hands them back on the next connection
                self.consumers.clear()

    def _session(self) -> None:
        with broker.connected() as conn:
            self.conn, self.channel = conn, conn.channel()
            self.channel.basic_qos(0, settings.DELAY_DELIVERY_PREFETCH, False)
            next_sync = 0.0
            while not self.stopping.is_set():
                if self.sync_now.is_set() or time.monotonic() >= next_sync:
                    self.sync_now.clear()
                    self._sync()
                    next_sync = time.monotonic() + settings.DELAY_CONSUMER_SYNC_SECONDS
                self._finish_webhooks()
                self._deliver_due()
                self._wait()

    def _wait(self) -> None:
        """Wait for the next message or due time, then take everything already waiting on the
        socket: drain_events returns after one message, and delivering between them made
        every batch a batch of one (a transaction per message again)."""
        timeout = 0.1
        if self.heap:
            timeout = min(timeout, max(0.0, (self.heap[0].due_ms - _now_ms()) / 1000))
        if not self.finished.empty():
            timeout = 0
        try:
            self.conn.drain_events(timeout=max(timeout, 0.0005))
            for _ in range(settings.DELAY_DELIVERY_BATCH * 4):
                self.conn.drain_events(timeout=0.0001)
        except socket.timeout:
            pass

    # --- which queues -----------------------------------------------------------------------

    def _sync(self) -> None:
        try:
            close_old_connections()
            wanted = selectors.endpoint_consumption()
        except DatabaseError as exc:
            log.warning("endpoint sync skipped: database unavailable (%s)", exc)
            return
        for name, active in wanted.items():
            if active and name not in self.consumers and self._queue_exists(name):
                self.consumers[name] = self.channel.basic_consume(
                    name, callback=self._on_message, on_cancel=self._on_cancel
                )
                log.info("consuming endpoint queue %s", name)
        for name in [n for n in self.consumers if not wanted.get(n)]:
            self.channel.basic_cancel(self.consumers.pop(name))
            self._give_back(name)
            log.info("pausing endpoint queue %s (endpoint inactive or gone)", name)

    def _queue_exists(self, name: str) -> bool:
        if queue_depth(self.conn, name) is not None:
            return True
        if name not in self.unknown_reported:
            log.warning("endpoint queue %s does not exist on the broker; re-bind the endpoint", name)
            self.unknown_reported.add(name)
        return False

    def _give_back(self, name: str) -> None:
        """A paused endpoint's held messages go back to its queue."""
        keep = []
        for held in self.heap:
            if held.message.delivery_info.get("routing_key", "").rsplit(".", 1)[-1] == name:
                self.channel.basic_reject(held.message.delivery_tag, requeue=True)
            else:
                keep.append(held)
        self.heap = keep
        heapq.heapify(self.heap)

    def _on_cancel(self, consumer_tag: str) -> None:
        for name, tag in list(self.consumers.items()):
            if tag == consumer_tag:
                del self.consumers[name]
                log.warning("the broker cancelled consuming %s (queue deleted?)", name)

    # --- messages -----------------------------------------------------------------------------

    def _on_message(self, message) -> None:
        held = read(message)
        if held is None:  # not ours: keep it unacked (never dropped) and say so once
            log.error("endpoint queue %s holds a message that is not a scheduling.deliver task; left unacked",
                      message.delivery_info.get("routing_key"))
            return
        heapq.heappush(self.heap, held)

    def _deliver_due(self) -> None:
        now = _now_ms()
        due = []
        while self.heap and self.heap[0].due_ms <= now and len(due) < settings.DELAY_DELIVERY_BATCH:
            due.append(heapq.heappop(self.heap))
        if not due:
            return
        try:
            outcomes = delivery_receive_many([(h.message_id, h.attempt) for h in due])
        except DatabaseError as exc:
            close_old_connections()
            for held in due:
                held.failures += 1
                wait_s = min(2 ** (held.failures - 1), 30)
                held.due_ms = _now_ms() + wait_s * 1000
                heapq.heappush(self.heap, held)
            log.warning("delivery of %d message(s) postponed: database unavailable (%s); retry in %ds, unacked",
                        len(due), exc, min(2 ** (due[0].failures - 1), 30))
            return
        for held, outcome in zip(due, outcomes):
            if outcome.result is Result.DEFERRED:
                future = self.webhooks.submit(delivery_receive, message_id=held.message_id, attempt=held.attempt)
                future.add_done_callback(lambda f, h=held: self.finished.put((h, f.exception() or f.result())))
            else:
                self._settle(held, outcome)

    def _finish_webhooks(self) -> None:
        while not self.finished.empty():
            held, result = self.finished.get()
            if isinstance(result, DatabaseError):
                held.failures += 1
                held.due_ms = _now_ms() + min(2 ** (held.failures - 1), 30) * 1000
                heapq.heappush(self.heap, held)
            elif isinstance(result, Exception):
                log.error("webhook delivery of %s raised %r; left unacked", held.message_id, result)
            else:
                self._settle(held, result)

    def _settle(self, held: Held, outcome: Outcome) -> None:
        if outcome.result is Result.EARLY:  # clocks disagree: wait for the row's due time
            held.due_ms = to_epoch_ms(outcome.eta)
            heapq.heappush(self.heap, held)
            return
        if outcome.result is Result.RETRY:
            self._publish_retry(held, outcome)
        self.channel.basic_ack(held.message.delivery_tag)

    def _publish_retry(self, held: Held, outcome: Outcome) -> None:
        """The next handler attempt: the same message again, due after the backoff, straight to
        where this one came from (the delivery exchange, or the queue)."""
        eta_ms = _now_ms() + int(outcome.retry_in * 1000)
        eta = datetime.fromtimestamp(eta_ms / 1000, tz=timezone.utc)
        out = wire.retry(held.message, held.message_id, outcome.attempt, eta)
        result = publish_confirmed(self.conn, [out])
        if not result.confirmed:
            raise OperationalError(f"retry of {held.message_id} not confirmed: {result.error or result.failed}")


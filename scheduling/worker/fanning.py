"""The delivery loop's fan-out thread (docs/concepts/fan-out.md): the loop hands it the event copies
it receives, and it publishes each event's messages to their endpoints (messages/fanout.py), on its
own database connection and its own publishing connection (``Broker.publish``, one per thread).

Why a thread: a fan-out of 50 messages holds a transaction, builds 50 copies and waits for their
confirms (~18 ms on this machine, most of it waiting); in the loop's own thread every delivery due
meanwhile waited behind it. The loop keeps what only it may do: the event copy belongs to its
broker connection, so the loop acks it (or holds it again) when the result comes back (``done``)."""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field

from django.db import DatabaseError, close_old_connections, connections

import rabbit
from scheduling.config.conf import broker
from scheduling.delivery.orphans import Carried, orphan_copy_set_aside
from scheduling.messages import wire
from scheduling.messages.fanout import FanOut, message_fan_out_many
from scheduling.observability import metrics
from scheduling.worker.holding import Held

log = logging.getLogger(__name__)
CONFIRM_SECONDS = 5.0  # a broker slower than this leaves the copies unconfirmed: tried again after the backoff
BATCH = 32  # event copies fanned out together: one transaction, one publish (its time is round trips)


@dataclass(eq=False)
class Fanning:
    """One event copy handed to the thread, and what became of it."""

    held: Held
    event: wire.EventCopy
    session: int  # the loop's connection it came on: only that one may ack it
    tasks: bool  # at due: a Celery queue's rows too (before due, every other row only)
    result: FanOut | None = None
    failed: str | None = None  # "database" or "broker": nothing was stamped; held again with that backoff
    errors: list[str] = field(default_factory=list)


class FanOutThread(threading.Thread):
    def __init__(self, worker_name: str = ""):
        super().__init__(name="dp-fan-out", daemon=True)
        self.worker_name = worker_name
        self.todo: queue.SimpleQueue[Fanning] = queue.SimpleQueue()
        self.done: queue.SimpleQueue[Fanning] = queue.SimpleQueue()
        self.stopping = threading.Event()

    def submit(self, item: Fanning) -> None:
        self.todo.put(item)

    def stop(self, timeout: float = 10) -> None:
        self.stopping.set()
        self.join(timeout)

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    batch = [self.todo.get(timeout=0.1)]
                except queue.Empty:
                    continue
                while len(batch) < BATCH and not self.todo.empty():
                    batch.append(self.todo.get())
                self._fan_out(batch)
                for item in batch:
                    self.done.put(item)
        finally:
            connections.close_all()

    def _fan_out(self, batch: list[Fanning]) -> None:
        try:
            results = message_fan_out_many(copies=[(item.event, item.tasks) for item in batch],
                                           publish=lambda copies: broker().publish(copies, timeout=CONFIRM_SECONDS))
            orphans = []
            for item, result in zip(batch, results, strict=True):
                item.result = result
                metrics.fanned_out(result.published)
                if result.missing and result.done and not result.tasks_waiting:
                    # rows it names that do not exist (a restore): kept for the operator as any copy naming no row
                    orphans += [Carried(i, 0, item.held.message.queue, item.event.due_ms, item.held.message.headers,
                                        item.held.message.body) for i in result.missing]
            if orphans:
                orphan_copy_set_aside(copies=orphans, by=self.worker_name)
        except DatabaseError as exc:
            close_old_connections()
            self._failed(batch, "database", exc)
        except rabbit.BrokerUnavailable as exc:
            self._failed(batch, "broker", exc)
        except Exception as exc:  # noqa: BLE001 (never let the thread die: the copies are held again, unacked)
            log.exception("fan-out of %d event(s) failed", len(batch))
            self._failed(batch, "broker", exc)

    @staticmethod
    def _failed(batch: list[Fanning], why: str, exc: Exception) -> None:
        for item in batch:
            item.failed, item.errors = why, [str(exc)]

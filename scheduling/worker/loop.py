"""The far end of the cascade: a thread in each platform worker that consumes every active
endpoint's queue, holds each message until it is due, and records due messages in batches.

Why not one Celery task per message: Celery sends a basic.qos for every eta-held message and
again when it runs, pickles each task to a pool process, and each task paid a transaction of its
own; that managed ~350 deliveries/s on this machine. Here one thread does what a delivery
needs: a timer of held messages (holding.py), one transaction per batch of due ones
(delivery_receive_many), then the acks. The messages are still ``scheduling.deliver`` task
messages, so the task remains a fallback for any worker without this loop.

This module is the loop's turn and what it hands where; its parts are their own modules: the
broker session (session.py) and the queues it follows (queue_sync.py), the settling and acks of
decided copies (settling.py), the webhook side (calls.py), the events' copies (event_copies.py),
the rescue (rescuing.py) and the spans (traces.py). What a message says (wire.read_delivery), when
it is due and how long to back off (holding.py, backoff.py) and what a hand-over means
(core/lifecycle.py) are pure and tested alone.

Guarantees kept: a message is acked only after its row is committed (a crash redelivers it);
never before due_at (the row is checked too); a database outage leaves messages unacked and
retries them with backoff. Webhooks: the loop takes their rows (a lease each), hands the calls to
the webhook engine (webhooks.py: one event loop, fair across teams and endpoints, each endpoint
bounded by its bulkhead), and the recorder (recorder.py, a thread of its own) writes the results
as they end while the loop starts the next calls; the loop settles what was written. No call
holds a transaction, and a receiver that never answers holds only its own endpoint's slots.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError, close_old_connections

import rabbit
from scheduling.config.conf import conf
from scheduling.core.clock import now_ms
from scheduling.core.flow_gate import FlowGate, Limit
from scheduling.delivery.flow_slots import (
    endpoint_key_take_slots,
    endpoint_key_take_slots_many,
    endpoint_take_slots,
)
from scheduling.delivery.services import Handover, Result, delivery_receive_many
from scheduling.messages import wire
from scheduling.observability import metrics
from scheduling.worker.calls import LEASED_RETRY_MS, WebhookCalls
from scheduling.worker.event_copies import EventCopies
from scheduling.worker.holding import Holding
from scheduling.worker.queue_sync import QueueSync
from scheduling.worker.rescuing import Rescue
from scheduling.worker.session import Session
from scheduling.worker.settling import Settling
from scheduling.worker.traces import Traces

log = logging.getLogger(__name__)
LONGEST_WAIT_SECONDS = 0.1  # how often the loop looks at webhooks, endpoint changes and stop
CALLS_WAIT_SECONDS = 0.005  # with webhook calls out: how soon their results are recorded


class DeliveryLoop(threading.Thread):
    def __init__(self, worker_name: str = "", rescue: bool = True, sync_now: threading.Event | None = None):
        super().__init__(name="dp-delivery-loop", daemon=True)
        self.worker_name = worker_name  # the Celery node name, recorded on every delivery
        self.settings = conf()
        self.stopping = threading.Event()
        # set: the queues are synced at the loop's next turn (which clears it); a loop process passes its signal's
        self.sync_now = sync_now if sync_now is not None else threading.Event()
        self.holding = Holding()
        self.flow = FlowGate()  # endpoints' rate and concurrency limits (flow.py)
        self.session = Session(self.settings)
        self.traces = Traces()
        self.settling = Settling(self.session, self.holding, self.traces, worker_name)
        self.calls = WebhookCalls(self.settings, worker_name, self.session, self.holding, self.flow, self.settling,
                                  self.traces, self.sync_now)
        self.events = EventCopies(worker_name, self.session, self.holding)
        # one loop of a worker looks for stuck copies (every loop of it consumes the same queues: rescuing.py)
        self.rescue = Rescue(self.settings, rescue, self.session, self.holding, self.calls)
        self.queues = QueueSync(self.session, self.holding, self.flow, self.calls, self.traces, self.settling,
                                self.rescue)
        self.beat_at = time.monotonic()  # the last turn of the loop (the worker health check reads it)

    # --- lifecycle of the thread --------------------------------------------------------------

    def health(self) -> dict:
        """What ``manage.py worker_health`` asks (through the dp_health control command)."""
        consumer = self.session.consumer
        return {"loop": "running" if self.is_alive() else "stopped",
                "connected": consumer is not None and consumer.conn is not None,
                "idle_seconds": round(time.monotonic() - self.beat_at, 3),
                "consuming": len(consumer.queues) if consumer is not None else 0}

    def start(self) -> None:
        self.calls.start()
        self.events.fanning.start()
        super().start()

    def stop(self, timeout: float = 10) -> None:
        self.stopping.set()
        self.join(timeout)
        self.calls.stop(timeout)  # the calls under way finish, and are recorded
        self.events.fanning.stop(timeout)

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self._session()
            except rabbit.BrokerUnavailable as exc:
                # a session that ran a while lost its node: reconnect at once (the next node of the
                # URL takes it; a 1 s wait would add to every held message's lateness);
                # one that could not even start waits 1 s, not to spin against a broker that is down
                if not self.stopping.is_set():
                    log.warning("delivery loop: %s; reconnecting", exc)
                    time.sleep(0.05 if time.monotonic() - started > 5 else 1)
            except Exception:  # never let the thread die silently
                log.exception("delivery loop failed; restarting it")
                time.sleep(1)
            finally:
                self.holding.clear()  # unacked: the broker hands them back on the next connection
                self.settling.clear()
                self.events.clear()  # their results are dropped: the copies come back on the next connection
                self.calls.clear()  # calls still out are recorded under their lease, then not acked
                metrics.held(0)

    def _session(self) -> None:
        consumer = self.session.open(self._on_message)
        with consumer.connected():
            self.session.started = time.monotonic()
            next_sync = self.rescue.next_at = 0.0
            while not self.stopping.is_set():
                self.beat_at = time.monotonic()
                if self.sync_now.is_set() or time.monotonic() >= next_sync:
                    self.sync_now.clear()
                    self.queues.sync()
                    next_sync = time.monotonic() + self.settings.consumer_sync_seconds
                self.calls.calls_ended()
                self.calls.settle_recorded()
                self.events.fanned()
                self._deliver_due()
                self.rescue.turn()
                metrics.held(len(self.holding))
                longest = CALLS_WAIT_SECONDS if self.calls.in_webhooks or self.events.fanning_out else LONGEST_WAIT_SECONDS
                ready = not (self.calls.finished.empty() and self.calls.recorder.done.empty()
                             and self.events.fanning.done.empty())
                wait_s = 0.0 if ready else self.holding.wait_seconds(now_ms(), longest)
                consumer.wait(max(wait_s, 0.0005), then_take=self.settings.delivery_batch * 4)

    # --- messages -----------------------------------------------------------------------------

    def _on_message(self, message: rabbit.Received) -> None:
        if (event := wire.read_event_copy(message.headers, message.body)) is not None:
            self.events.hold(message, event)  # fanned out as it arrives (event_copies.py)
            return
        deliveries = wire.read_deliveries(message.headers, message.body, now_ms())
        if deliveries is None:  # not ours: keep it unacked (never dropped) and say so
            log.error("endpoint queue %s holds a message that is not a scheduling.deliver task or envelope; "
                      "left unacked", message.queue)
            return
        if len(deliveries) > 1:  # an envelope: acked once every message in it is settled
            self.settling.envelope(message.tag, len(deliveries))
        for delivery in deliveries:
            self.holding.hold(message, delivery)

    def _deliver_due(self) -> None:
        ready = self.holding.due(now_ms(), self.settings.delivery_batch)
        ready = self.events.fan_out_due(ready)
        if not ready:
            return
        ready = self.calls.bulkheads(ready, now_ms())
        due = ready
        try:
            now = now_ms()
            due, waiting = self.flow.admit(ready, now, _take_slots, _take_key_slots)
            for held, until_ms in waiting:  # over an endpoint's limit: held for its slot
                self.holding.hold_until(held, until_ms)
            if not due:
                return
            calls = [h for h in due if h.message.queue in self.calls.profiles]
            due = [h for h in due if h.message.queue not in self.calls.profiles]
            if calls:
                try:
                    self.calls.start_calls(calls, now)
                except DatabaseError:
                    due = calls + due  # none of them was taken: all wait for the database
                    raise
            if not due:
                return
            # the queue each came from: a copy naming another endpoint's row is dropped (MISROUTED)
            outcomes = delivery_receive_many(items=[Handover(message_id=h.delivery.message_id,
                                                             attempt=h.delivery.attempt,
                                                             due_ms=h.delivery.stamped_due_ms,
                                                             throttled_ms=self.flow.throttled_ms(h, now),
                                                             queue=h.message.queue)
                                                    for h in due], by=self.worker_name,
                                             traceparents=self.traces.handed(due))
        except DatabaseError as exc:
            close_old_connections()
            self.calls.slots_lost()  # a closed connection held them
            for held in due:
                self.flow.done(held)
                self.traces.not_handed(held.delivery.message_id)  # chosen again next time
            waits = [self.holding.database_failed(held, now_ms()) for held in due]
            log.warning("delivery of %d message(s) postponed: database unavailable (%s); retry in %gs, unacked",
                        len(due), exc, min(waits))
            return
        decided = []
        for held, outcome in zip(due, outcomes):
            self.flow.done(held)
            if outcome.result is Result.DEFERRED:  # a webhook endpoint this loop has no profile of yet
                self.traces.not_handed(held.delivery.message_id)
                self.sync_now.set()
                self.holding.hold_until(held, now_ms() + LEASED_RETRY_MS)
            else:
                decided.append((held, outcome))
        self.settling.settle_all(decided)


def _take_slots(limit: Limit, count: int, spacing_us: int, since_ms: int, key: str | None = None) -> int:
    """The first slot's delay from ``since_ms`` (the endpoint's, or ``key``'s): the database's
    delay counts from its statement, which this clock reads after it (never placed early)."""
    first_us = (endpoint_take_slots(limit=limit, count=count, spacing_us=spacing_us) if key is None
                else endpoint_key_take_slots(limit=limit, key=key, count=count, spacing_us=spacing_us))
    return first_us + (now_ms() - since_ms) * 1000


def _take_key_slots(limit: Limit, counts: dict[str, int], spacing_us: int, since_ms: int) -> dict[str, int]:
    """_take_slots for the keys of one endpoint, in one statement."""
    firsts = endpoint_key_take_slots_many(limit=limit, counts=counts, spacing_us=spacing_us)
    elapsed_us = (now_ms() - since_ms) * 1000
    return {key: first_us + elapsed_us for key, first_us in firsts.items()}

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
off (holding.py, backoff.py) and what a hand-over means (core/lifecycle.py) are pure and tested alone.

Guarantees kept: a message is acked only after its row is committed (a crash redelivers it);
never before due_at (the row is checked too); a database outage leaves messages unacked and
retries them with backoff. Webhooks: the loop takes their rows (a lease each), hands the calls to
the webhook engine (webhooks.py: one event loop, fair across teams and endpoints, each endpoint
bounded by its bulkhead), and the recorder (recorder.py, a thread of its own) writes the results
as they end while the loop starts the next calls; the loop settles what was written. No call
holds a transaction, and a receiver that never answers holds only its own endpoint's slots.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections import defaultdict, deque

from django.db import DatabaseError, close_old_connections

import rabbit
from scheduling.config.conf import broker, conf
from scheduling.core import traceparent
from scheduling.core.clock import from_epoch_ms, now_ms, to_epoch_ms
from scheduling.core.flow_gate import FlowGate, Limit
from scheduling.delivery.flow_slots import (
    endpoint_key_flow_forget,
    endpoint_key_take_slots,
    endpoint_key_take_slots_many,
    endpoint_release_call_slots,
    endpoint_take_call_slots,
    endpoint_take_slots,
)
from scheduling.delivery.handlers import WebhookProfile, payload_body, signed_headers, webhook_profiles
from scheduling.delivery.orphans import Carried, orphan_copy_set_aside
from scheduling.delivery.recorder import Recorder
from scheduling.delivery.services import (
    Handover,
    Outcome,
    Result,
    delivery_receive_many,
    delivery_retry_unsent,
)
from scheduling.delivery.webhook_calls import CallToken, webhook_call_take
from scheduling.delivery.webhooks import Call, CallResult, EngineSettings, WebhookEngine
from scheduling.endpoints.selectors import (
    endpoint_any_task_queue,
    endpoint_get_consumption,
    endpoint_get_flow_limits,
    endpoint_get_labels_by_queue,
)
from scheduling.messages import wire
from scheduling.messages.rescue import message_rescue_overdue, message_rescue_overdue_tasks
from scheduling.observability import metrics, tracing
from scheduling.worker.fanning import Fanning, FanOutThread
from scheduling.worker.holding import Held, Holding
from scheduling.worker.key_slots import KeyCallSlots

log = logging.getLogger(__name__)
LONGEST_WAIT_SECONDS = 0.1  # how often the loop looks at webhooks, endpoint changes and stop
CALLS_WAIT_SECONDS = 0.005  # with webhook calls out: how soon their results are recorded
LEASED_RETRY_MS = 250  # a copy whose row another call holds looks again this soon


def _paused(profile: WebhookProfile, until_ms: int) -> WebhookProfile:
    return dataclasses.replace(profile, paused_until_ms=max(profile.paused_until_ms, until_ms))


class DeliveryLoop(threading.Thread):
    def __init__(self, worker_name: str = "", rescue: bool = True):
        super().__init__(name="dp-delivery-loop", daemon=True)
        self.worker_name = worker_name  # the Celery node name, recorded on every delivery
        # one loop of a worker looks for stuck copies (every loop of it consumes the same queues);
        # the look reads the in-flight index up to its cutoff, dead entries included: ~33 ms at
        # 100,000 deliveries since the last vacuum, so not 4 times a second in every loop
        self.rescues = rescue
        self.settings = conf()
        self.stopping = threading.Event()
        self.sync_now = threading.Event()
        self.finished: queue.SimpleQueue = queue.SimpleQueue()  # CallResult from the webhook engine
        self.engine = WebhookEngine(EngineSettings(self.settings.webhook_concurrency,
                                                   self.settings.webhook_response_max_bytes,
                                                   self.settings.webhook_excerpt_bytes), self.finished.put)
        self.profiles: dict[str, WebhookProfile] = {}  # queue -> how to call it (webhook endpoints)
        self.parked: dict[int, deque[Held]] = defaultdict(deque)  # endpoint id -> due, its bulkhead full
        self.recorder = Recorder(worker_name)  # writes the ended calls' results (recorder.py)
        self.call_slots: dict[int, set[int]] = defaultdict(set)  # endpoint id -> max_concurrent slots held
        self.key_slots = KeyCallSlots()  # max_concurrent_per_key's, per call in flight (key_slots.py)
        self.holding = Holding()
        self.flow = FlowGate()  # endpoints' rate and concurrency limits (flow.py)
        self.consumer: rabbit.Consumer | None = None
        self.unknown_reported: set[str] = set()
        self.beat_at = time.monotonic()  # the last turn of the loop (the worker health check reads it)
        self.session_no = 0  # which broker connection a held message came on (acks go to that one only)
        self.in_webhooks: set[str] = set()  # ids taken for a call or parked for one, not yet settled
        self.parts: dict[int, int] = {}  # delivery tag of an envelope -> its messages not yet settled
        self.given_back: set[int] = set()  # envelopes rejected whole while a message of theirs was at a webhook
        self.event_copies: dict[int, wire.EventCopy] = {}  # delivery tag -> an event copy held for its fan-out
        self.fanning = FanOutThread(worker_name)  # fans them out (fanning.py)
        self.fanning_out: set[int] = set()  # event copies at the fan-out thread
        # tracing on only (observability/tracing.py): queue -> (team, endpoint) names, and the spans
        # of webhook deliveries out (message id -> (deliver span, attempt span))
        self.labels: dict[str, tuple[str, str]] = {}
        self.spans: dict[str, tuple] = {}
        self.deliver_ids: dict[str, str] = {}  # message id -> the traceparent its deliver span will have
        self.task_queues = False  # some team has a celery_queue endpoint: the rescue looks at them too (_sync)
        self.task_queue_seen_busy: dict[str, float] = {}  # Celery queue -> when it last had messages ready
        self.session_started = float("-inf")

    # --- lifecycle of the thread --------------------------------------------------------------

    def health(self) -> dict:
        """What ``manage.py worker_health`` asks (through the dp_health control command)."""
        consumer = self.consumer
        return {"loop": "running" if self.is_alive() else "stopped",
                "connected": consumer is not None and consumer.conn is not None,
                "idle_seconds": round(time.monotonic() - self.beat_at, 3),
                "consuming": len(consumer.queues) if consumer is not None else 0}

    def start(self) -> None:
        self.engine.start()
        self.recorder.start()
        self.fanning.start()
        super().start()

    def stop(self, timeout: float = 10) -> None:
        self.stopping.set()
        self.join(timeout)
        self.engine.stop()  # the calls under way finish (delivery/webhooks.py)
        # their results came after the loop's last turn: recorded here, or the receiver would have a
        # call the database does not, and the next worker would call again once the lease ran out
        ended = []
        while not self.finished.empty():
            ended.append(self.finished.get())
        if ended:
            self.recorder.submit(ended)
        self.recorder.stop(timeout)
        self.fanning.stop(timeout)

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
                self.parts.clear()
                self.given_back.clear()
                self.event_copies.clear()
                self.fanning_out.clear()  # their results are dropped: the copies come back on the next connection
                self.parked.clear()
                self.in_webhooks.clear()  # calls still out are recorded under their lease, then not acked
                metrics.held(0)

    def _session(self) -> None:
        self.session_no += 1
        self.consumer = rabbit.Consumer(broker().url, prefetch=self.settings.delivery_prefetch,
                                        on_message=self._on_message, on_cancel=self._on_cancel,
                                        connect_timeout=broker().connect_timeout)
        with self.consumer.connected():
            self.session_started = time.monotonic()
            next_sync = next_rescue = 0.0
            while not self.stopping.is_set():
                self.beat_at = time.monotonic()
                if self.sync_now.is_set() or time.monotonic() >= next_sync:
                    self.sync_now.clear()
                    self._sync()
                    next_sync = time.monotonic() + self.settings.consumer_sync_seconds
                self._calls_ended()
                self._settle_recorded()
                self._fanned()
                self._deliver_due()
                if self.rescues and self.settings.rescue_after_ms and time.monotonic() >= next_rescue:
                    found = self._rescue()
                    # 4 looks a rescue while it finds some, 2 while it finds none
                    next_rescue = time.monotonic() + self.settings.rescue_after_ms / (4000 if found else 2000)
                metrics.held(len(self.holding))
                longest = CALLS_WAIT_SECONDS if self.in_webhooks or self.fanning_out else LONGEST_WAIT_SECONDS
                ready = not (self.finished.empty() and self.recorder.done.empty() and self.fanning.done.empty())
                wait_s = 0.0 if ready else self.holding.wait_seconds(now_ms(), longest)
                self.consumer.wait(max(wait_s, 0.0005), then_take=self.settings.delivery_batch * 4)

    # --- which queues -----------------------------------------------------------------------

    def _sync(self) -> None:
        try:
            if not any(self.call_slots.values()) and not self.key_slots:  # max_concurrent's slots are this
                close_old_connections()  # connection's session locks: closed (CONN_MAX_AGE) while calls were out,
                # they went to other workers
            wanted = {name for name, active in endpoint_get_consumption().items() if active}
            if wire.FANOUT_QUEUE in self.consumer.queues or self.consumer.queue_exists(wire.FANOUT_QUEUE):
                wanted.add(wire.FANOUT_QUEUE)  # events' copies (docs/concepts/fan-out.md), once provisioned
            self.flow.set_limits(endpoint_get_flow_limits())
            if any(limit.per_key_second for limit in self.flow.limits.values()):
                endpoint_key_flow_forget()  # the key slots' table keeps the keys of the last minute (flow_slots.py)
            self.profiles = webhook_profiles()
            if tracing.ENABLED:
                self.labels = endpoint_get_labels_by_queue()
            self.task_queues = self.rescues and endpoint_any_task_queue()
        except DatabaseError as exc:
            log.warning("endpoint sync skipped: database unavailable (%s)", exc)
            return
        for name in sorted(wanted - self.consumer.queues):
            if self._queue_exists(name):
                self.consumer.consume(name)
                log.info("consuming endpoint queue %s", name)
        for name in sorted(self.consumer.queues - wanted):
            self.consumer.cancel(name)
            parked = [held for helds in self.parked.values() for held in helds if held.message.queue == name]
            for endpoint_id in [e for e, helds in self.parked.items() if helds and helds[0].message.queue == name]:
                del self.parked[endpoint_id]
            self.in_webhooks.difference_update(held.delivery.message_id for held in parked)
            released = {held.message.tag: held.message
                        for held in [*self.holding.release(lambda h, name=name: h.message.queue == name), *parked]}
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
        if (event := wire.read_event_copy(message.headers, message.body)) is not None:
            self.event_copies[message.tag] = event  # fanned out as it arrives (_fan_out)
            self.holding.hold(message, wire.Delivery(f"event:{event.event_id}", 0, now_ms(), stamped=False))
            return
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
        if self.event_copies and ready:  # events' copies (docs/concepts/fan-out.md): fanned out, not delivered
            copies = [held for held in ready if held.message.tag in self.event_copies]
            ready = [held for held in ready if held.message.tag not in self.event_copies]
            self._fan_out(copies)
        if not ready:
            return
        ready = self._bulkheads(ready, now_ms())
        due = ready
        try:
            now = now_ms()
            due, waiting = self.flow.admit(ready, now, self._take_slots, self._take_key_slots)
            for held, until_ms in waiting:  # over an endpoint's limit: held for its slot
                self.holding.hold_until(held, until_ms)
            if not due:
                return
            calls = [h for h in due if h.message.queue in self.profiles]
            due = [h for h in due if h.message.queue not in self.profiles]
            if calls:
                try:
                    self._start_calls(calls, now)
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
                                             traceparents=self._handed_traceparents(due))
        except DatabaseError as exc:
            close_old_connections()
            self.call_slots.clear()  # a closed connection held them
            self.key_slots.clear()
            for held in due:
                self.flow.done(held)
                if self.deliver_ids:
                    self.deliver_ids.pop(held.delivery.message_id, None)  # chosen again next time
            waits = [self.holding.database_failed(held, now_ms()) for held in due]
            log.warning("delivery of %d message(s) postponed: database unavailable (%s); retry in %gs, unacked",
                        len(due), exc, min(waits))
            return
        decided = []
        for held, outcome in zip(due, outcomes):
            self.flow.done(held)
            if outcome.result is Result.DEFERRED:  # a webhook endpoint this loop has no profile of yet
                if self.deliver_ids:
                    self.deliver_ids.pop(held.delivery.message_id, None)
                self.sync_now.set()
                self.holding.hold_until(held, now_ms() + LEASED_RETRY_MS)
            else:
                decided.append((held, outcome))
        self._settle_all(decided)

    def _fan_out(self, due: list[Held]) -> None:
        """Event copies leave the cascade the arrival margin (or up to a unit more) before due: as
        one arrives, the fan-out thread (fanning.py) sends each of its rows' own copy to its endpoint,
        where this loop or another holds it until due as any copy, so the fan-out's time is not
        added to its lateness; a Celery queue's rows (their task runs on arrival) go at due."""
        for held in due:
            event = self.event_copies[held.message.tag]
            self.fanning_out.add(held.message.tag)
            self.fanning.submit(Fanning(held, event, self.session_no, tasks=now_ms() >= event.due_ms))

    def _fanned(self) -> None:
        """Settle what the fan-out thread did: the event copy acked; held again with the backoff
        when the database was away or copies were not confirmed (never lost: the rows stamped are
        skipped the next time); a Celery queue's rows waiting: held until due. A result of an
        earlier connection is dropped: its event copy came back on this one."""
        acks = []
        while not self.fanning.done.empty():
            item = self.fanning.done.get()
            held, event = item.held, item.event
            if item.session != self.session_no:
                continue
            self.fanning_out.discard(held.message.tag)
            result = item.result
            if item.failed or not result.done:
                backoff = self.holding.database_failed if item.failed == "database" else self.holding.broker_failed
                wait = backoff(held, now_ms())
                log.warning("fan-out of event %s postponed (%s); retry in %gs, unacked", event.event_id,
                            item.errors[:1] or f"{result.unconfirmed} cop(ies) not confirmed", wait)
            elif result.tasks_waiting:  # a Celery queue's rows: at due (never before)
                self.holding.hold_until(held, event.due_ms)
            else:
                del self.event_copies[held.message.tag]
                acks.append(held.message)
        self.consumer.ack_many(acks)

    def _bulkheads(self, ready: list[Held], now: int) -> list[Held]:
        """Of the due messages, those whose call may be handed over now: a paused endpoint's wait
        for its pause to end; those beyond what their endpoint may have handed over (its bulkhead
        running and as many ready: WebhookProfile.handover) are parked until a call of it ends."""
        go, room = [], {}
        for held in ready:
            profile = self.profiles.get(held.message.queue)
            if profile is None:
                go.append(held)
            elif profile.paused_until_ms > now:
                self.holding.hold_until(held, profile.paused_until_ms)
            else:
                left = room.setdefault(profile.endpoint_id, self.engine.room(profile.endpoint_id, profile.handover))
                if left > 0:
                    room[profile.endpoint_id] = left - 1
                    go.append(held)
                else:
                    if profile.max_concurrent is not None and profile.max_concurrent <= profile.limit:
                        self.flow.throttle(held, now)  # its wait is flow control's (max_concurrent)
                    self.parked[profile.endpoint_id].append(held)
                    self.in_webhooks.add(held.delivery.message_id)
        return go

    def _unpark(self, endpoint_id: int, now: int) -> None:
        """Calls of the endpoint ended: as many parked messages as it has room for are due again."""
        parked = self.parked.get(endpoint_id)
        if not parked:
            return
        profile = self.profiles.get(parked[0].message.queue)
        room = self.engine.room(endpoint_id, profile.handover) if profile is not None else len(parked)
        for _ in range(min(room, len(parked))):
            held = parked.popleft()
            self.in_webhooks.discard(held.delivery.message_id)
            self.holding.hold_until(held, now)
        if not parked:
            del self.parked[endpoint_id]

    def _start_calls(self, due: list[Held], now: int) -> None:
        """Take the rows of due webhook messages (a lease each) and hand their calls to the engine;
        copies not taken are settled (duplicates, cancelled) or held (early, leased elsewhere)."""
        due, slot_of = self._take_call_slots(due, now)
        if not due:
            return
        items = [Handover(message_id=h.delivery.message_id, attempt=h.delivery.attempt,
                          due_ms=h.delivery.stamped_due_ms, throttled_ms=self.flow.throttled_ms(h, now),
                          queue=h.message.queue) for h in due]
        profile_of = {h.delivery.message_id: self.profiles[h.message.queue] for h in due}
        taken, others = webhook_call_take(items=items, deadlines={i: p.lease_s for i, p in profile_of.items()})
        calls, decided, timestamp = [], [], int(time.time())
        for held in due:
            message_id = held.delivery.message_id
            row = taken.pop(message_id, None)
            if row is None:
                self.flow.done(held)
                self._release_call_slot(profile_of[message_id].endpoint_id, slot_of.get(message_id))
                self._release_key_slots([held])
                outcome = others[message_id]
                if outcome.result is Result.BUSY:
                    self.holding.hold_until(held, now_ms() + LEASED_RETRY_MS)
                else:
                    decided.append((held, outcome))
                continue
            profile = profile_of[message_id]
            row.team_id = profile.team_id
            body = payload_body(row.payload)
            headers = signed_headers(list(profile.keys), message_id=message_id, due_at=row.due_at,
                                     attempt=row.attempt + 1, body=body, timestamp=timestamp)
            if held.message.headers.get(wire.H_TRACEPARENT) or held.message.headers.get(wire.H_TRACEPARENTS):
                self._trace_call(held, row, profile, headers)
            calls.append(Call(message_id=message_id, endpoint=profile.endpoint_id, team=profile.team_id,
                              url=profile.url, body=body, headers=headers, deadline_s=profile.deadline_s,
                              networks=profile.networks, limit=profile.limit,
                              token=CallToken(held=held, row=row, session=self.session_no,
                                              slot=slot_of.get(message_id))))
            self.in_webhooks.add(message_id)
        self.engine.submit(calls)
        self._settle_all(decided)
        # a copy let through that made no call (waiting for its key's turn, a duplicate, leased elsewhere)
        # took room it did not use: the endpoint's parked ones take it now, since no call of theirs may
        # be out to end and unpark them
        for endpoint_id in {profile_of[h.delivery.message_id].endpoint_id for h in due} & self.parked.keys():
            self._unpark(endpoint_id, now)

    def _take_call_slots(self, due: list[Held], now: int) -> tuple[list[Held], dict[str, int]]:
        """An endpoint with max_concurrent: a slot of it for each call, across workers (delivery/flow_slots.py);
        a message with none free waits as flow control's BUSY does."""
        due = self._take_key_call_slots(due, now)
        go, slot_of, wanting = [], {}, defaultdict(list)
        for held in due:
            profile = self.profiles[held.message.queue]
            (wanting[profile] if profile.max_concurrent else go).append(held)
        for profile, helds in wanting.items():
            held_slots = self.call_slots[profile.endpoint_id]
            slots = endpoint_take_call_slots(endpoint_id=profile.endpoint_id, concurrent=profile.max_concurrent,
                                             held=sorted(held_slots), count=len(helds))
            held_slots.update(slots)
            for held, slot in zip(helds, slots):
                slot_of[held.delivery.message_id] = slot
                go.append(held)
            for held in helds[len(slots):]:
                self.flow.done(held)
                self._release_key_slots([held])
                self.holding.hold_until(held, self.flow.back(held, now))
        return go, slot_of

    def _take_key_call_slots(self, due: list[Held], now: int) -> list[Held]:
        """A keyed message of an endpoint with max_concurrent_per_key: a slot of its key for its call,
        across workers (key_slots.py), taken before the endpoint's; with none free it waits as above."""
        go, wanting = [], defaultdict(list)
        for held in due:
            profile = self.profiles[held.message.queue]
            key = held.delivery.flow_key
            if profile.max_concurrent_per_key and key:
                wanting[(profile.endpoint_id, key, profile.max_concurrent_per_key)].append(held)
            else:
                go.append(held)
        if not wanting:
            return go
        got, missed = self.key_slots.take(wanting)
        for held in missed:
            self.flow.done(held)
            self.holding.hold_until(held, self.flow.back(held, now))
        return go + got

    def _release_key_slots(self, helds: list[Held]) -> None:
        if not self.key_slots:
            return
        try:
            self.key_slots.release(helds)
        except DatabaseError:  # the connection is gone, and with it every lock it held
            close_old_connections()
            self.key_slots.clear()
            self.call_slots.clear()

    def _release_call_slot(self, endpoint_id: int, slot: int | None) -> None:
        self._release_slots({endpoint_id: [slot]} if slot is not None else {})

    def _release_call_slots(self, results: list[CallResult]) -> None:
        slots = defaultdict(list)
        for result in results:
            if result.call.token.slot is not None:
                slots[result.call.endpoint].append(result.call.token.slot)
        self._release_slots(slots)

    def _release_slots(self, slots: dict[int, list[int]]) -> None:
        """One statement per endpoint; a slot this connection no longer holds is skipped."""
        try:
            for endpoint_id, numbers in slots.items():
                held = self.call_slots.get(endpoint_id, set())
                mine = [n for n in numbers if n in held]
                held.difference_update(mine)
                if mine:
                    endpoint_release_call_slots(endpoint_id=endpoint_id, slots=mine)
        except DatabaseError:  # the connection is gone, and with it every lock it held
            close_old_connections()
            self.call_slots.clear()
            self.key_slots.clear()

    @staticmethod
    def _take_slots(limit: Limit, count: int, spacing_us: int, since_ms: int, key: str | None = None) -> int:
        """The first slot's delay from ``since_ms`` (the endpoint's, or ``key``'s): the database's
        delay counts from its statement, which this clock reads after it (never placed early)."""
        first_us = (endpoint_take_slots(limit=limit, count=count, spacing_us=spacing_us) if key is None
                    else endpoint_key_take_slots(limit=limit, key=key, count=count, spacing_us=spacing_us))
        return first_us + (now_ms() - since_ms) * 1000

    @staticmethod
    def _take_key_slots(limit: Limit, counts: dict[str, int], spacing_us: int, since_ms: int) -> dict[str, int]:
        """_take_slots for the keys of one endpoint, in one statement."""
        firsts = endpoint_key_take_slots_many(limit=limit, counts=counts, spacing_us=spacing_us)
        elapsed_us = (now_ms() - since_ms) * 1000
        return {key: first_us + elapsed_us for key, first_us in firsts.items()}

    def _calls_ended(self) -> None:
        """Calls that ended go to the recorder; their endpoints' slots are free at once: a healthy
        endpoint's parked messages start while the recorder writes (one whose call failed waits
        for its record, which may pause it: a Retry-After is heard before its next call)."""
        ended = []
        while not self.finished.empty():
            ended.append(self.finished.get())
        if not ended:
            return
        self._release_call_slots(ended)  # the calls are over: max_concurrent counts calls, not records
        self._release_key_slots([result.call.token.held for result in ended])
        if self.spans:
            for result in ended:
                if (spans := self.spans.get(result.call.message_id)) is not None and spans[1] is not None:
                    tracing.attempt_end(spans[1], outcome=result.outcome if result.called else "not_called",
                                        status_code=result.status_code, started_s=result.started_at,
                                        duration_ms=result.duration_ms)
                    self.spans[result.call.message_id] = (spans[0], None)
        self.recorder.submit(ended)
        failing = {result.call.endpoint for result in ended if not result.ok}
        now = now_ms()
        for endpoint_id in {result.call.endpoint for result in ended} - failing:
            self._unpark(endpoint_id, now)

    def _settle_recorded(self) -> None:
        """Settle what the recorder wrote: acked, a retry published, or held again (handed back
        unattempted: its endpoint paused; not recorded: called again after its lease)."""
        while not self.recorder.done.empty():
            written = self.recorder.done.get()
            now = now_ms()
            for result in written.unrecorded:
                held, row = result.call.token.held, result.call.token.row
                self.in_webhooks.discard(held.delivery.message_id)
                self.flow.done(held)
                self.holding.hold_until(held, to_epoch_ms(row.lease_until))
            recorded = written.recorded
            for endpoint_id, until in recorded.paused.items():
                until_ms = int(until.timestamp() * 1000)
                self.engine.pause(endpoint_id, max(0.0, (until_ms - now) / 1000))
                self.profiles = {q: (p if p.endpoint_id != endpoint_id else _paused(p, until_ms))
                                 for q, p in self.profiles.items()}
            if recorded.disabled:
                self.sync_now.set()
            decided, ended = [], set()
            for result in written.results:
                held, session = result.call.token.held, result.call.token.session
                self.in_webhooks.discard(held.delivery.message_id)
                self.flow.done(held)
                ended.add(result.call.endpoint)
                outcome = recorded.outcomes[held.delivery.message_id]
                if session != self.session_no:  # its broker message came back on the new connection
                    if outcome.result is Result.RETRY:
                        self._publish_retry(held, outcome)
                    continue
                if outcome.result is Result.BUSY:  # handed back unattempted
                    profile = self.profiles.get(held.message.queue)
                    self.holding.hold_until(held, max(now + LEASED_RETRY_MS,
                                                      profile.paused_until_ms if profile else 0))
                else:
                    decided.append((held, outcome))
            for endpoint_id in ended:
                self._unpark(endpoint_id, now)
            self._settle_all(decided)

    def _rescue(self) -> int:
        """Messages overdue by DELAY_RESCUE_AFTER_MS that this loop neither holds nor is handing
        over: their copy is stuck in the broker (messages/rescue.py). Not while the loop is behind:
        its prefetch full (unacked broker messages, an envelope counting once), or messages ready
        in its hold for half the setting (a copy of each overdue message would double the work of a
        burst it has not caught up with, and the delivery rate would collapse).
        Then, if any team has one, the Celery-queue endpoints of every team, whose queues no loop
        consumes (the user's workers do); not while behind either: their look reads the same
        overdue index range, and a burst's backlog is in it.
        The copies' confirms are waited for 1 s at most: a queue whose leader is being elected must
        not stop the loop."""
        settings = self.settings
        if len(self.consumer.unsettled) >= settings.delivery_prefetch:
            return 0
        if self.holding.behind_ms(now_ms()) > settings.rescue_after_ms / 2 or self.parked:
            return 0  # behind (a burst, or calls waiting for their endpoint's bulkhead): they wait in the loop
        skip = self.holding.ids_due_before(now_ms() - settings.rescue_after_ms) | self.in_webhooks

        def publish(copies):
            return self.consumer.publish(copies, timeout=1.0)

        try:
            found = message_rescue_overdue(queues=self.consumer.queues, skip=skip, publish=publish,
                                           limit=settings.delivery_batch)
            if self.task_queues:
                found += message_rescue_overdue_tasks(publish=publish, limit=settings.delivery_batch,
                                                      queue_busy=self._task_queue_busy)
            return found
        except DatabaseError as exc:
            close_old_connections()
            log.warning("overdue check skipped: database unavailable (%s)", exc)
            return 0

    def _task_queue_busy(self, name: str) -> bool:
        """Whether a Celery queue's workers may still hold an overdue task's copy: its queue has
        messages ready, or had within 2 x DELAY_RESCUE_AFTER_MS (they took them into their prefetch,
        where they wait for a pool slot, unclaimed), or this loop's session is that young (a worker
        restarting takes its own queues' backlog first). A queue gone is not busy: the copy ends
        unroutable and the row failed, with the reason."""
        now, grace = time.monotonic(), 2 * self.settings.rescue_after_ms / 1000
        if self.consumer.queue_ready(name):
            self.task_queue_seen_busy[name] = now
        return now - max(self.task_queue_seen_busy.get(name, float("-inf")), self.session_started) < grace

    def _settle_all(self, decided: list[tuple[Held, Outcome]]) -> None:
        """Settle a batch, then ack it in one write (as few frames as AMQP's multiple ack allows).
        If a retry cannot be published the session ends: every retry of the batch not yet sent is
        forgotten on its row first, since its held copy, unacked, comes back and must deliver."""
        decided = self._set_aside_orphans(decided)
        if tracing.ENABLED:
            self._trace_settled(decided)
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

    # --- tracing (observability/tracing.py; docs/observability/tracing.md) ----------------------

    def _trace_call(self, held: Held, row, profile: WebhookProfile, headers: dict) -> None:
        """The webhook's ``traceparent``: with tracing on, the attempt span's (a child of this
        delivery's span, both ended later); off, the copy's own, passed on as it came."""
        message_id = held.delivery.message_id
        parent = wire.traceparent_of(held.message.headers, message_id)
        if parent is None:
            return
        if not tracing.ENABLED:
            headers[wire.H_TRACEPARENT] = parent
            return
        if (earlier := self.spans.pop(message_id, None)) is not None:  # its call was handed back: held again
            tracing.deliver_end(earlier[0], outcome="held", lateness_ms=None)
        team, endpoint = self.labels.get(held.message.queue, (None, None))
        deliver = tracing.deliver_start(parent=parent, message_id=message_id, team=team, endpoint=endpoint,
                                        attempt=row.attempt + 1)
        attempt = tracing.attempt_start(deliver, message_id=message_id, team=team, endpoint=endpoint,
                                        attempt=row.attempt + 1, url=profile.url)
        headers[wire.H_TRACEPARENT] = tracing.header_of(attempt)
        self.spans[message_id] = (deliver, attempt)

    def _handed_traceparents(self, due: list[Held]) -> dict[str, str] | None:
        """What each traced copy's handler (a Celery task) is handed: with tracing on, the id of
        the deliver span _trace_settled makes for it (chosen now), else the copy's own."""
        handed = None
        for held in due:
            headers = held.message.headers
            if wire.H_TRACEPARENT not in headers and wire.H_TRACEPARENTS not in headers:
                continue
            message_id = held.delivery.message_id
            if (parent := wire.traceparent_of(headers, message_id)) is None:
                continue
            if tracing.ENABLED:
                parent = self.deliver_ids[message_id] = traceparent.child(parent)
            handed = handed or {}
            handed[message_id] = parent
        return handed

    def _trace_settled(self, decided: list[tuple[Held, Outcome]]) -> None:
        """A deliver span for each settled copy that carries a trace: a webhook's, started with its
        call, ends now; any other's is the hand-over just made."""
        now = now_ms()
        for held, outcome in decided:
            message_id = held.delivery.message_id
            spans = self.spans.pop(message_id, None)
            handed = self.deliver_ids.pop(message_id, None) if self.deliver_ids else None  # its task's
            if spans is None:
                parent = wire.traceparent_of(held.message.headers, message_id)
                if parent is None:
                    continue
                team, endpoint = self.labels.get(held.message.queue, (None, None))
                spans = (tracing.deliver_start(parent=parent, message_id=message_id, team=team, endpoint=endpoint,
                                               attempt=held.delivery.attempt + 1,
                                               start_ns=held.delivery.due_ms * 1_000_000
                                               if held.delivery.due_ms < now else None,
                                               span_id=traceparent.span_id(handed) if handed else None), None)
            lateness = now - held.delivery.due_ms if outcome.result is Result.DELIVERED else None
            tracing.deliver_end(spans[0], outcome=outcome.result.value, lateness_ms=lateness)

    def _set_aside_orphans(self, decided: list[tuple[Held, Outcome]]) -> list[tuple[Held, Outcome]]:
        """Copies whose row is missing (UNKNOWN) are kept for the operator, with what they carried,
        before they are acked (delivery/orphans.py); with the database away they are held and tried
        again, unacked, like any delivery."""
        orphans = [held for held, outcome in decided if outcome.result is Result.UNKNOWN]
        if not orphans:
            return decided
        try:
            orphan_copy_set_aside(copies=[Carried(h.delivery.message_id, h.delivery.attempt, h.message.queue,
                                                  h.delivery.stamped_due_ms, h.message.headers, h.message.body)
                                          for h in orphans], by=self.worker_name)
        except DatabaseError as exc:
            close_old_connections()
            waits = [self.holding.database_failed(held, now_ms()) for held in orphans]
            log.warning("%d cop(ies) naming no row not set aside yet: database unavailable (%s); retry in %gs, "
                        "unacked", len(orphans), exc, min(waits))
            return [(held, outcome) for held, outcome in decided if outcome.result is not Result.UNKNOWN]
        return decided

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

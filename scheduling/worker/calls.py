"""The delivery loop's webhook side: the calls it hands to the webhook engine (delivery/webhooks.py)
and what it holds while they are out. Each endpoint's bulkhead (a due message beyond it is parked
until a call of that endpoint ends), the max_concurrent slots and the flow keys' call slots
(session locks on the loop's connection, shared by every worker: delivery/flow_slots.py,
key_slots.py), the rows taken with a lease each before the call (delivery/webhook_calls.py), and
the results: handed to the recorder (delivery/recorder.py, a thread of its own) as the calls end,
settled once written (acked, a retry published, or held again).

Apart from the loop because this is one piece of state with its own rules: the ids at a webhook or
parked for one (the rescue skips them), the slots the loop's connection holds (lost with it), the
endpoints' profiles and pauses. No call holds a transaction, and a receiver that never answers
holds only its own endpoint's slots."""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections import defaultdict, deque

from django.db import DatabaseError, close_old_connections

from scheduling.config.conf import DelaySettings
from scheduling.core.clock import now_ms, to_epoch_ms
from scheduling.core.flow_gate import FlowGate
from scheduling.delivery.flow_slots import endpoint_release_call_slots, endpoint_take_call_slots
from scheduling.delivery.handlers import WebhookProfile, payload_body, signed_headers
from scheduling.delivery.recorder import Recorder
from scheduling.delivery.services import Handover, Result
from scheduling.delivery.webhook_calls import CallToken, webhook_call_take
from scheduling.delivery.webhooks import Call, CallResult, EngineSettings, WebhookEngine
from scheduling.messages import wire
from scheduling.worker.holding import Held, Holding
from scheduling.worker.key_slots import KeyCallSlots
from scheduling.worker.session import Session
from scheduling.worker.settling import Settling
from scheduling.worker.traces import Traces

LEASED_RETRY_MS = 250  # a copy whose row another call holds looks again this soon


def _paused(profile: WebhookProfile, until_ms: int) -> WebhookProfile:
    return dataclasses.replace(profile, paused_until_ms=max(profile.paused_until_ms, until_ms))


class WebhookCalls:
    def __init__(self, settings: DelaySettings, worker_name: str, session: Session, holding: Holding, flow: FlowGate,
                 settling: Settling, traces: Traces, sync_now: threading.Event):
        self.session, self.holding, self.flow, self.settling, self.traces = session, holding, flow, settling, traces
        self.sync_now = sync_now  # set when an endpoint was disabled: the loop follows at once
        self.finished: queue.SimpleQueue = queue.SimpleQueue()  # CallResult from the webhook engine
        self.engine = WebhookEngine(EngineSettings(settings.webhook_concurrency,
                                                   settings.webhook_response_max_bytes,
                                                   settings.webhook_excerpt_bytes), self.finished.put)
        self.recorder = Recorder(worker_name)  # writes the ended calls' results (recorder.py)
        self.profiles: dict[str, WebhookProfile] = {}  # queue -> how to call it (webhook endpoints)
        self.parked: dict[int, deque[Held]] = defaultdict(deque)  # endpoint id -> due, its bulkhead full
        self.in_webhooks: set[str] = set()  # ids taken for a call or parked for one, not yet settled
        self.call_slots: dict[int, set[int]] = defaultdict(set)  # endpoint id -> max_concurrent slots held
        self.key_slots = KeyCallSlots()  # max_concurrent_per_key's, per call in flight (key_slots.py)

    def start(self) -> None:
        self.engine.start()
        self.recorder.start()

    def stop(self, timeout: float) -> None:
        """After the loop's last turn: the calls under way finish (delivery/webhooks.py), and their
        results, which came after that turn, are recorded here, or the receiver would have a call
        the database does not, and the next worker would call again once the lease ran out."""
        self.engine.stop()
        ended = []
        while not self.finished.empty():
            ended.append(self.finished.get())
        if ended:
            self.recorder.submit(ended)
        self.recorder.stop(timeout)

    def holds_slots(self) -> bool:
        """Whether the loop's connection holds slots (max_concurrent's, its keys'): session locks."""
        return any(self.call_slots.values()) or bool(self.key_slots)

    def slots_lost(self) -> None:
        """The connection that held the slots was closed: they went with it."""
        self.call_slots.clear()
        self.key_slots.clear()

    def unpark_queue(self, name: str) -> list[Held]:
        """The queue's endpoint is paused or gone: its parked messages, taken out to go back."""
        parked = [held for helds in self.parked.values() for held in helds if held.message.queue == name]
        for endpoint_id in [e for e, helds in self.parked.items() if helds and helds[0].message.queue == name]:
            del self.parked[endpoint_id]
        self.in_webhooks.difference_update(held.delivery.message_id for held in parked)
        return parked

    def clear(self) -> None:
        """The connection is gone: calls still out are recorded under their lease, then not acked."""
        self.parked.clear()
        self.in_webhooks.clear()

    def bulkheads(self, ready: list[Held], now: int) -> list[Held]:
        """Of the due messages, those whose call may be handed over now: a paused endpoint's wait
        for its pause to end; those beyond what their endpoint may have handed over (its bulkhead
        running and as many ready: WebhookProfile.handover) are parked until a call of it ends."""
        go: list[Held] = []
        room: dict[int, int] = {}
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

    def unpark(self, endpoint_id: int, now: int) -> None:
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

    def start_calls(self, due: list[Held], now: int) -> None:
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
                self.traces.call(held, row, profile, headers)
            calls.append(Call(message_id=message_id, endpoint=profile.endpoint_id, team=profile.team_id,
                              url=profile.url, body=body, headers=headers, deadline_s=profile.deadline_s,
                              networks=profile.networks, limit=profile.limit,
                              token=CallToken(held=held, row=row, session=self.session.number,
                                              slot=slot_of.get(message_id))))
            self.in_webhooks.add(message_id)
        self.engine.submit(calls)
        self.settling.settle_all(decided)
        # a copy let through that made no call (waiting for its key's turn, a duplicate, leased elsewhere)
        # took room it did not use: the endpoint's parked ones take it now, since no call of theirs may
        # be out to end and unpark them
        for endpoint_id in {profile_of[h.delivery.message_id].endpoint_id for h in due} & self.parked.keys():
            self.unpark(endpoint_id, now)

    def _take_call_slots(self, due: list[Held], now: int) -> tuple[list[Held], dict[str, int]]:
        """An endpoint with max_concurrent: a slot of it for each call, across workers (delivery/flow_slots.py);
        a message with none free waits as flow control's BUSY does."""
        due = self._take_key_call_slots(due, now)
        go: list[Held] = []
        slot_of: dict[str, int] = {}
        wanting: defaultdict[WebhookProfile, list[Held]] = defaultdict(list)
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

    def calls_ended(self) -> None:
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
        self.traces.calls_ended(ended)
        self.recorder.submit(ended)
        failing = {result.call.endpoint for result in ended if not result.ok}
        now = now_ms()
        for endpoint_id in {result.call.endpoint for result in ended} - failing:
            self.unpark(endpoint_id, now)

    def settle_recorded(self) -> None:
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
                if session != self.session.number:  # its broker message came back on the new connection
                    if outcome.result is Result.RETRY:
                        self.settling.publish_retry(held, outcome)
                    continue
                if outcome.result is Result.BUSY:  # handed back unattempted
                    profile = self.profiles.get(held.message.queue)
                    self.holding.hold_until(held, max(now + LEASED_RETRY_MS,
                                                      profile.paused_until_ms if profile else 0))
                else:
                    decided.append((held, outcome))
            for endpoint_id in ended:
                self.unpark(endpoint_id, now)
            self.settling.settle_all(decided)

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

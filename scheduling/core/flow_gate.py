"""Flow control per endpoint, in the delivery loop: a rate (hand-over slots, evenly spaced, shared
by every worker through the database: delivery/flow_slots.py) and a concurrency (webhook calls in flight:
this loop's count here, every worker's through a lock per call in the delivery service).

Why slots and not a token bucket per worker: the limit must hold across workers, and a bucket
lets a burst through at its size. One UPDATE hands a loop a run of slots ``spacing_us`` apart
that no other loop can get; each message is held until its slot (the hold the loop already has)
and never dropped. A message handed over later than its slot by more than LATE_SLOT_MS (the loop
was busy, a webhook thread was slow to start) gives its slot up and takes a new one, else a
stalled loop would catch up in a burst.

The arithmetic of "no second sees more than the rate": a hand-over happens in [slot, slot +
LATE_SLOT_MS], and the receiver sees it within RECEIVER_JITTER_MS more; slots ``(1 s + LATE_SLOT_MS
+ RECEIVER_JITTER_MS) / rate`` apart put at most ``rate`` of them in any second the receiver
counts. The price is 7 % of the rate (500/s hands over 467 a second).

By key (a message's ``flow_key``; the endpoint's max_deliveries_per_second_per_key and
max_concurrent_per_key): the same slots and the same count, per (endpoint, key), on top of the
endpoint's own. A keyed message first waits for its key's slot (keys are independent: a busy key's
backlog never takes the endpoint's slots, so other keys are not held back by it), then, its key
slot kept, for the endpoint's slot as any message. When the endpoint's slot comes later than the key
slot's window, the key slot moves with it (``key_slot_ms``): the message goes in its endpoint slot's
window, never before its key's slot. Exact while the endpoint's own rate has no backlog; under one,
a key's hand-overs may come closer than its spacing (never closer than the endpoint's), which the
flow-control guide says. Per-key state here is only for messages held or in flight (bounded by the
prefetch); the shared state is in PostgreSQL (delivery/flow_slots.py).

Pure: the clock (``now_ms``) and the slot source (``take``) are passed in.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

MAX_DELIVERIES_PER_SECOND = 100_000
MAX_CONCURRENT = 1_000
LATE_SLOT_MS = 50  # a webhook thread started 20-60 ms after its slot on a busy 2-core machine (the GIL)
RECEIVER_JITTER_MS = 20
BUSY_RETRY_MS = 2  # a message waiting for a webhook call to end looks again this soon
# A loop reserves slots this far ahead at most, and looks again for its other messages LEAD_MS
# before that run ends: loops with a backlog for one endpoint take turns, run by run. Taking a
# backlog's slots all at once gave the first loop the first half of the burst and the second loop
# the rest, so one loop at a time delivered (and could not keep the rate alone).
AHEAD_MS = 250
LEAD_MS = 50


@dataclass(frozen=True)
class Limit:
    """An endpoint's limits, by the name of its queue (the endpoint's name)."""

    endpoint_id: int
    per_second: int | None = None
    concurrent: int | None = None
    per_key_second: int | None = None  # per flow_key of its messages (max_deliveries_per_second_per_key)
    per_key_concurrent: int | None = None  # max_concurrent_per_key

    @property
    def keyed(self) -> bool:
        return self.per_key_second is not None or self.per_key_concurrent is not None


def slot_spacing_us(per_second: int) -> int:
    return math.ceil((1000 + LATE_SLOT_MS + RECEIVER_JITTER_MS) * 1000 / per_second)


# take(limit, count, spacing_us, now_ms, key) -> how long after now_ms the first of ``count`` slots
# of the endpoint (key None) or of its flow key is (µs, >= 0; measured when the slots came back, so
# never earlier than the slot itself)
TakeSlots = Callable[[Limit, int, int, int, str | None], int]
# take_keys(limit, {key: count}, spacing_us, now_ms) -> {key: the same}: many keys of one endpoint at once
TakeKeySlots = Callable[[Limit, dict[str, int], int, int], dict[str, int]]


class _Message(Protocol):
    @property
    def queue(self) -> str: ...


class _Delivery(Protocol):
    @property
    def flow_key(self) -> str | None: ...


class Gated(Protocol):
    """What the gate reads and writes on a held message (worker/holding.Held): core names no worker
    type, so the gate states the fields it uses."""

    @property
    def message(self) -> _Message: ...
    @property
    def delivery(self) -> _Delivery: ...

    slot_ms: float | None
    throttled_since_ms: int | None
    counted: bool
    key_slot_ms: float | None
    key_counted: tuple[str, str] | None


H = TypeVar("H", bound=Gated)


def key_of(held: Gated, limit: Limit) -> str | None:
    """The flow key ``held`` counts under: its own, where its endpoint has per-key limits."""
    return held.delivery.flow_key if limit.keyed else None


class FlowGate:
    """Which due messages go now, and until when the others wait. A held message (holding.Held)
    carries its slot (``slot_ms``), the time flow control first held it back
    (``throttled_since_ms``) and whether it counts in ``in_flight`` (``counted``)."""

    def __init__(self) -> None:
        self.limits: dict[str, Limit] = {}
        self.in_flight: Counter[str] = Counter()  # this loop's webhook calls per queue, admitted and not done
        # the same per (queue, flow key): an entry only while a call of the key is in flight
        self.in_flight_keys: Counter[tuple[str, str]] = Counter()

    def set_limits(self, limits: dict[str, Limit]) -> None:
        self.limits = limits

    def admit(self, due: Iterable[H], now_ms: int, take: TakeSlots,
              take_keys: TakeKeySlots | None = None) -> tuple[list[H], list[tuple[H, int]]]:
        """(the messages to hand over now, [(a message, the time to look at it again)]). The keys'
        slots of one endpoint are taken in one call of ``take_keys`` (else one ``take`` per key)."""
        go: list[H] = []
        wait: list[tuple[H, int]] = []
        need: dict[str, list[H]] = {}  # queue -> its messages waiting for an endpoint slot
        need_key: dict[str, dict[str, list[H]]] = {}  # queue -> flow key -> those waiting for a key slot
        for held in due:
            limit = self.limits.get(held.message.queue)
            if limit is None:
                go.append(held)
            elif (key := key_of(held, limit)) and limit.per_key_second and not self.key_slot_kept(held, now_ms):
                need_key.setdefault(held.message.queue, {}).setdefault(key, []).append(held)
            else:
                self._endpoint_rate(held, limit, now_ms, go, wait, need)
        for queue, keyed in need_key.items():  # each key's run of slots, apart from the others
            limit = self.limits[queue]
            assert limit.per_key_second  # only a key with a rate waits for a key slot
            spacing_us = slot_spacing_us(limit.per_key_second)
            counts = {key: min(len(helds), max(1, AHEAD_MS * 1000 // spacing_us)) for key, helds in keyed.items()}
            firsts = (take_keys(limit, counts, spacing_us, now_ms) if take_keys is not None
                      else {key: take(limit, count, spacing_us, now_ms, key) for key, count in counts.items()})
            for key, helds in keyed.items():
                self._key_run(helds, counts[key], firsts[key], spacing_us, limit, now_ms, go, wait, need)
        for queue, helds in need.items():
            limit = self.limits[queue]
            assert limit.per_second is not None  # only an endpoint with a rate has messages in need
            spacing_us = slot_spacing_us(limit.per_second)
            taking = helds[:max(1, AHEAD_MS * 1000 // spacing_us)]
            first_us = take(limit, len(taking), spacing_us, now_ms, None)
            for index, held in enumerate(taking):
                delay_us = first_us + index * spacing_us
                held.slot_ms = now_ms + delay_us / 1000
                if held.key_slot_ms is not None and key_of(held, limit):  # its key slot goes with it
                    held.key_slot_ms = max(held.key_slot_ms, held.slot_ms)
                if delay_us <= 0:
                    self._go_if_free(held, limit, now_ms, go, wait)
                else:
                    wait.append((self.throttle(held, now_ms), now_ms + math.ceil(delay_us / 1000)))
            run_ends_ms = now_ms + (first_us + (len(taking) - 1) * spacing_us) // 1000
            for held in helds[len(taking):]:  # no slot yet: back for one as this run ends
                again_ms = max(now_ms + 1, run_ends_ms - LEAD_MS)
                if held.key_slot_ms is not None and key_of(held, limit):  # its key slot waits with it
                    held.key_slot_ms = max(held.key_slot_ms, again_ms)
                wait.append((self.throttle(held, now_ms), again_ms))
        return go, wait

    def _key_run(self, helds: list[H], count: int, first_us: int, spacing_us: int, limit: Limit, now_ms: int,
                 go: list[H], wait: list[tuple[H, int]], need: dict[str, list[H]]) -> None:
        """A key's run of ``count`` slots, the first ``first_us`` from now, for the first of ``helds``;
        the others look again as the run ends."""
        for index, held in enumerate(helds[:count]):
            delay_us = first_us + index * spacing_us
            held.key_slot_ms = now_ms + delay_us / 1000
            if delay_us <= 0:
                self._endpoint_rate(held, limit, now_ms, go, wait, need)
            else:
                wait.append((self.throttle(held, now_ms), now_ms + math.ceil(delay_us / 1000)))
        run_ends_ms = now_ms + (first_us + (count - 1) * spacing_us) // 1000
        for held in helds[count:]:
            wait.append((self.throttle(held, now_ms), max(now_ms + 1, run_ends_ms - LEAD_MS)))

    def _endpoint_rate(self, held: H, limit: Limit, now_ms: int, go: list[H], wait: list[tuple[H, int]],
                       need: dict[str, list[H]]) -> None:
        """Its key's rate allows ``held`` (or it has none): now the endpoint's."""
        if limit.per_second is None or self.slot_kept(held, now_ms):
            self._go_if_free(held, limit, now_ms, go, wait)
        else:
            need.setdefault(held.message.queue, []).append(held)

    @staticmethod
    def slot_kept(held: Gated, now_ms: float) -> bool:
        """Whether ``held`` may be handed over now on the slot it has (never before it)."""
        return held.slot_ms is not None and held.slot_ms <= now_ms + 0.5 and now_ms - held.slot_ms <= LATE_SLOT_MS

    @staticmethod
    def key_slot_kept(held: Gated, now_ms: float) -> bool:
        """The same for its flow key's slot."""
        slot = held.key_slot_ms
        return slot is not None and slot <= now_ms + 0.5 and now_ms - slot <= LATE_SLOT_MS

    def late(self, held: Gated, now_ms: int) -> bool:
        """Asked by a webhook thread before its call: a rate-limited message past its slot's window
        (its endpoint's or its key's) goes back for another slot."""
        limit = self.limits.get(held.message.queue)
        if limit is None:
            return False
        if limit.per_key_second is not None and key_of(held, limit) and not self.key_slot_kept(held, now_ms):
            return True
        return limit.per_second is not None and not self.slot_kept(held, now_ms)

    def back(self, held: Gated, now_ms: int) -> int:
        """When a message that could not be handed over (every call slot busy, its rate slot
        missed) looks again: in BUSY_RETRY_MS while its slot still holds then, else at once, for a
        new slot."""
        self.throttle(held, now_ms)
        if held.key_slot_ms is not None and not self.key_slot_kept(held, now_ms + BUSY_RETRY_MS):
            held.key_slot_ms = held.slot_ms = None  # a new key slot first, then the endpoint's
            return now_ms
        if held.slot_ms is not None and not self.slot_kept(held, now_ms + BUSY_RETRY_MS):
            held.slot_ms = None
            return now_ms
        return now_ms + BUSY_RETRY_MS

    def done(self, held: Gated) -> None:
        """``held``'s hand-over is over (whatever came of it)."""
        if held.counted:
            held.counted = False
            queue = held.message.queue
            self.in_flight[queue] -= 1
            if self.in_flight[queue] <= 0:
                del self.in_flight[queue]
        if held.key_counted is not None:
            counted, held.key_counted = held.key_counted, None
            self.in_flight_keys[counted] -= 1
            if self.in_flight_keys[counted] <= 0:
                del self.in_flight_keys[counted]

    def _go_if_free(self, held: H, limit: Limit, now_ms: int, go: list[H], wait: list[tuple[H, int]]) -> None:
        queue = held.message.queue
        per_key = limit.per_key_concurrent
        key = key_of(held, limit) if per_key is not None else None
        if limit.concurrent is not None and self.in_flight[queue] >= limit.concurrent or \
                key and per_key is not None and self.in_flight_keys[(queue, key)] >= per_key:
            wait.append((held, self.back(held, now_ms)))
            return
        if limit.concurrent is not None:
            self.in_flight[queue] += 1
            held.counted = True
        if key:
            self.in_flight_keys[(queue, key)] += 1
            held.key_counted = (queue, key)
        go.append(held)

    @staticmethod
    def throttle(held: H, now_ms: int) -> H:
        """``held`` waits for its endpoint's flow control from ``now_ms`` (if it was not already)."""
        if held.throttled_since_ms is None:
            held.throttled_since_ms = now_ms
        return held

    @staticmethod
    def throttled_ms(held: Gated, now_ms: int) -> int | None:
        """How long flow control held ``held`` back (None: never)."""
        return None if held.throttled_since_ms is None else max(0, now_ms - held.throttled_since_ms)

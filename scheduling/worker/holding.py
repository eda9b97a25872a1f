"""The delivery loop's timer: messages held until they are due, earliest first. Pure: the clock
(``now_ms``) is always passed in, so every rule is tested with tables and no waiting."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from rabbit import Received
from scheduling.core import backoff
from scheduling.messages.wire import Delivery


@dataclass(order=True)
class Held:
    due_ms: int
    seq: int  # arrival order breaks ties: never compare messages
    message: Received = field(compare=False)
    delivery: Delivery = field(compare=False)
    failures: int = field(compare=False, default=0)  # database or broker outages met so far
    # flow control (flow.py): its rate slot, when it was first held back, whether it counts as in flight
    slot_ms: float | None = field(compare=False, default=None)
    throttled_since_ms: int | None = field(compare=False, default=None)
    counted: bool = field(compare=False, default=False)
    # flow control by key: its key's rate slot, and the (queue, key) it counts in while in flight
    key_slot_ms: float | None = field(compare=False, default=None)
    key_counted: tuple[str, str] | None = field(compare=False, default=None)


class Holding:
    def __init__(self):
        self._heap: list[Held] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def hold(self, message: Received, delivery: Delivery) -> Held:
        held = Held(delivery.due_ms, next(self._seq), message, delivery)
        heapq.heappush(self._heap, held)
        return held

    def hold_until(self, held: Held, due_ms: int) -> None:
        """Back in the heap with a new due time (clocks disagreed, or a retry later)."""
        held.due_ms, held.seq = due_ms, next(self._seq)
        heapq.heappush(self._heap, held)

    def database_failed(self, held: Held, now_ms: int) -> float:
        """The database was away when ``held`` was due: hold it for the backoff, return it."""
        return self._postpone(held, now_ms, backoff.database)

    def broker_failed(self, held: Held, now_ms: int) -> float:
        """The broker did not take ``held``'s handler task: hold it for the (short) backoff."""
        return self._postpone(held, now_ms, backoff.broker)

    def _postpone(self, held: Held, now_ms: int, rule) -> float:
        held.failures += 1
        wait_s = rule(held.failures)
        self.hold_until(held, now_ms + int(wait_s * 1000))
        return wait_s

    def due(self, now_ms: int, limit: int) -> list[Held]:
        """Take up to ``limit`` messages due by ``now_ms``, earliest first."""
        taken = []
        while self._heap and self._heap[0].due_ms <= now_ms and len(taken) < limit:
            taken.append(heapq.heappop(self._heap))
        return taken

    def ids_due_before(self, due_ms: int) -> set[str]:
        """Ids of held messages whose own due time is before ``due_ms``, however long they are held
        now (a database or broker outage postpones them); not those flow control holds back (the
        rescue leaves an endpoint with a backlog of slots alone: messages/rescue.py)."""
        return {held.delivery.message_id for held in self._heap
                if held.delivery.due_ms < due_ms and held.throttled_since_ms is None}

    def behind_ms(self, now_ms: int) -> int:
        """How long the earliest message ready for delivery has waited for the loop (0: none waits)."""
        return max(0, now_ms - self._heap[0].due_ms) if self._heap else 0

    def wait_seconds(self, now_ms: int, longest: float) -> float:
        """How long the loop may sleep: until the next due time, at most ``longest``."""
        if not self._heap:
            return longest
        return min(longest, max(0.0, (self._heap[0].due_ms - now_ms) / 1000))

    def release(self, which: Callable[[Held], bool]) -> list[Held]:
        """Take out every held message ``which`` selects (to give them back to the broker)."""
        released = [held for held in self._heap if which(held)]
        if released:
            self._heap = [held for held in self._heap if not which(held)]
            heapq.heapify(self._heap)
        return released

    def clear(self) -> list[Held]:
        released, self._heap = self._heap, []
        return released

"""The call slots of flow keys a delivery loop holds (max_concurrent_per_key; docs/guides/flow-control.md
"By key"): session-level advisory locks on the loop's connection, one per webhook call of a keyed
message in flight, shared by every worker through PostgreSQL (delivery/flow_slots.py). Apart from
the loop: its state is only the calls in flight (an entry per call, removed as it ends), so it is
bounded by the loop's calls, whatever the number of keys."""

from __future__ import annotations

from collections import defaultdict

from scheduling.delivery.flow_slots import endpoint_key_release_call_slots, endpoint_key_take_call_slots


class KeyCallSlots:
    def __init__(self):
        self.held: dict[tuple[int, str], set[int]] = {}  # (endpoint id, key) -> slots this connection holds
        # id() of a held copy at a call -> (endpoint id, key, slot): by copy, not message id (two copies of
        # one message in a batch each take a slot; the one whose row is not taken gives its own back)
        self.of: dict[int, tuple[int, str, int]] = {}

    def __bool__(self) -> bool:
        return bool(self.of)

    def take(self, wanting: dict[tuple[int, str, int], list]) -> tuple[list, list]:
        """For each (endpoint id, key, max_concurrent_per_key) a slot per message (``held``) as far as
        free ones go: (the messages that got one, those that did not)."""
        got, missed = [], []
        for (endpoint_id, key, concurrent), helds in wanting.items():
            mine = self.held.get((endpoint_id, key), set())
            slots = endpoint_key_take_call_slots(endpoint_id=endpoint_id, key=key, concurrent=concurrent,
                                                 held=sorted(mine), count=len(helds))
            if slots:
                self.held[(endpoint_id, key)] = mine | set(slots)
            for held, slot in zip(helds, slots):
                self.of[id(held)] = (endpoint_id, key, slot)
                got.append(held)
            missed += helds[len(slots):]
        return got, missed

    def release(self, helds) -> None:
        """The calls of ``helds`` ended (or never started): their slots are free, one statement per key."""
        freed = defaultdict(list)
        for held in helds:
            if (taken := self.of.pop(id(held), None)) is not None:
                freed[taken[:2]].append(taken[2])
        for (endpoint_id, key), slots in freed.items():
            mine = self.held.get((endpoint_id, key), set())
            slots = [s for s in slots if s in mine]
            mine.difference_update(slots)
            if not mine:
                self.held.pop((endpoint_id, key), None)
            if slots:
                endpoint_key_release_call_slots(endpoint_id=endpoint_id, key=key, slots=slots)

    def clear(self) -> None:
        """The connection that held them is gone, and with it every lock."""
        self.held.clear()
        self.of.clear()

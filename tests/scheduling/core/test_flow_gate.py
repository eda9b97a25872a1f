"""Flow control's gate, with the clock and the slot source passed in: evenly spaced slots shared
by several loops, slots kept or given up, call slots in flight, the wait recorded."""

import pytest

from harness.windows import most_in_window
from rabbit import Received
from scheduling.core import flow_gate as flow
from scheduling.core.flow_gate import BUSY_RETRY_MS, LATE_SLOT_MS, FlowGate, Limit, slot_spacing_us
from scheduling.messages.wire import Delivery
from scheduling.worker.holding import Holding


class Slots:
    """What delivery/flow_slots.py does in the database: one next free slot per endpoint, and one
    per (endpoint, flow key)."""

    def __init__(self, clock):
        self.clock, self.next_us, self.calls = clock, {}, []

    def __call__(self, limit: Limit, count: int, spacing_us: int, since_ms: int, key: str | None = None) -> int:
        assert since_ms == self.clock()
        self.calls.append((limit.endpoint_id, count) if key is None else (limit.endpoint_id, key, count))
        now_us = self.clock() * 1000
        slots = limit.endpoint_id if key is None else (limit.endpoint_id, key)  # a key's apart from its endpoint's
        first = max(self.next_us.get(slots, 0), now_us)
        self.next_us[slots] = first + count * spacing_us
        return int(first - now_us)

    def keys(self, limit: Limit, counts: dict[str, int], spacing_us: int, since_ms: int) -> dict[str, int]:
        """Many keys of one endpoint in one call (flow_slots.endpoint_key_take_slots_many)."""
        self.calls.append((limit.endpoint_id, dict(counts)))
        before = len(self.calls)
        firsts = {key: self(limit, count, spacing_us, since_ms, key) for key, count in counts.items()}
        del self.calls[before:]
        return firsts


def held_messages(count: int, *, queue: str = "hooks", due_ms: int = 0, prefix: str = "m") -> Holding:
    holding = Holding()
    for tag in range(count):
        holding.hold(Received(tag=tag, body=b"", queue=queue), Delivery(f"{prefix}{tag}", 0, due_ms))
    return holding


def run(gates_and_holdings, take, clock, *, until_ms: int, batch: int = 100,
        keys: bool = False) -> list[tuple[int, object]]:
    """Every loop hands over what its gate lets through, exactly when due, until nothing is held:
    [(hand-over ms, held)]."""
    handed = []
    while any(len(h) for _, h in gates_and_holdings):
        clock.now = min(h._heap[0].due_ms for _, h in gates_and_holdings if len(h))
        assert clock.now <= until_ms, "the gate never let everything through"
        for gate, holding in gates_and_holdings:
            go, wait = gate.admit(holding.due(clock.now, batch), clock.now, take, take.keys if keys else None)
            handed += [(clock.now, held) for held in go]
            for held, until in wait:
                holding.hold_until(held, until)
    return handed


class Clock:
    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now


def most_in_one_second(times_ms: list[float]) -> int:
    return most_in_window(times_ms, 1000)


def test_spacing_leaves_room_for_the_late_window_and_the_receivers_jitter():
    assert slot_spacing_us(500) == 2140  # (1000 + 50 + 20) ms / 500
    assert slot_spacing_us(1) == 1_070_000
    # hand-overs up to LATE_SLOT_MS after their slot, seen up to RECEIVER_JITTER_MS later:
    # slots in any window of 1 s + both fit at most the rate
    for rate in (1, 7, 500, 100_000):
        window_us = (1000 + LATE_SLOT_MS + flow.RECEIVER_JITTER_MS) * 1000
        assert window_us // slot_spacing_us(rate) <= rate


def test_an_endpoint_without_limits_is_not_gated():
    clock = Clock()
    gate, take = FlowGate(), Slots(clock)
    gate.set_limits({"other": Limit(1, per_second=1)})
    go, wait = gate.admit(held_messages(5).due(0, 10), 0, take)
    assert len(go) == 5 and wait == [] and take.calls == []


def test_a_burst_goes_out_evenly_at_the_rate_all_of_it():
    clock = Clock()
    gate, take = FlowGate(), Slots(clock)
    gate.set_limits({"hooks": Limit(1, per_second=100)})
    handed = run([(gate, held_messages(1000))], take, clock, until_ms=20_000)
    times = [t for t, _ in handed]
    assert len({h.delivery.message_id for _, h in handed}) == 1000
    assert times[0] == 0  # the first slot is now
    assert most_in_one_second(times) <= 100
    gaps = {round(b - a, 3) for a, b in zip(times, times[1:])}
    assert gaps <= {10.0, 11.0}  # 10.7 ms apart, held to whole milliseconds
    assert 10_500 <= times[-1] <= 10_800


def test_two_loops_sharing_the_slots_keep_one_limit_and_take_turns():
    clock = Clock()
    take = Slots(clock)
    loops = []
    for name in "ab":
        gate = FlowGate()
        gate.set_limits({"hooks": Limit(7, per_second=50)})
        loops.append((gate, held_messages(300, prefix=name)))
    handed = run(loops, take, clock, until_ms=20_000)
    assert len(handed) == 600
    assert most_in_one_second([t for t, _ in handed]) <= 50
    # each loop hands over in every second of the 12.8 s, not one loop in the first half only
    for name in "ab":
        seconds = {int(t // 1000) for t, held in handed if held.delivery.message_id.startswith(name)}
        assert seconds == set(range(13)), (name, sorted(seconds))


def test_a_slot_is_kept_while_on_time_and_given_up_when_missed():
    clock = Clock()
    gate, take = FlowGate(), Slots(clock)
    gate.set_limits({"hooks": Limit(1, per_second=10)})
    go, wait = gate.admit(held_messages(2).due(0, 10), 0, take)
    (second, at), = wait
    assert at == 107  # 1.07 s / 10
    # handed over within LATE_SLOT_MS of its slot: no new slot
    go, wait = gate.admit([second], at + LATE_SLOT_MS - 1, take)
    assert go == [second] and len(take.calls) == 1
    # later than that: a new slot, after every slot taken so far
    second.slot_ms, second.counted = 107, False
    clock.now = 107 + LATE_SLOT_MS + 1
    go, wait = gate.admit([second], clock.now, take)
    assert go == [] and wait[0][1] == 214 and len(take.calls) == 2


def test_call_slots_in_flight_are_counted_and_freed():
    gate = FlowGate()
    gate.set_limits({"hooks": Limit(1, concurrent=2)})
    due = held_messages(5).due(0, 10)
    go, wait = gate.admit(due, 0, lambda *a: pytest.fail("no rate: no slots"))
    assert len(go) == 2 and gate.in_flight["hooks"] == 2
    assert [until for _, until in wait] == [BUSY_RETRY_MS] * 3
    gate.done(go[0])
    gate.done(go[0])  # once only
    go2, wait2 = gate.admit([held for held, _ in wait], BUSY_RETRY_MS, None)
    assert len(go2) == 1 and len(wait2) == 2 and gate.in_flight["hooks"] == 2


def test_back_keeps_a_slot_that_still_holds_and_drops_one_that_does_not():
    gate = FlowGate()
    gate.set_limits({"hooks": Limit(1, per_second=10, concurrent=1)})
    (held,) = held_messages(1).due(0, 1)
    held.slot_ms = 100
    assert gate.back(held, 100) == 100 + BUSY_RETRY_MS and held.slot_ms == 100
    assert gate.back(held, 100 + LATE_SLOT_MS) == 100 + LATE_SLOT_MS and held.slot_ms is None
    assert gate.late(held, 200)  # no slot: a webhook thread sends it back


def test_the_wait_is_counted_from_the_first_hold_back():
    clock = Clock()
    gate, take = FlowGate(), Slots(clock)
    gate.set_limits({"hooks": Limit(1, per_second=10)})
    handed = run([(gate, held_messages(3, due_ms=0))], take, clock, until_ms=5_000)
    assert [gate.throttled_ms(held, t) for t, held in handed] == [None, 107, 214]


# --- by key (a message's flow_key; max_deliveries_per_second_per_key, max_concurrent_per_key) ------


def keyed_messages(keys: list[str | None], *, queue: str = "hooks") -> Holding:
    holding = Holding()
    for tag, key in enumerate(keys):
        holding.hold(Received(tag=tag, body=b"", queue=queue), Delivery(f"m{tag}", 0, 0, flow_key=key))
    return holding


def times_of(handed, key) -> list[int]:
    return [at for at, held in handed if held.delivery.flow_key == key]


@pytest.mark.parametrize("rate, count", [(5, 20), (1, 3), (50, 120)])
def test_a_key_over_its_rate_waits_and_another_key_does_not(rate, count):
    clock = Clock()
    gate, take = FlowGate(), Slots(clock)
    gate.set_limits({"hooks": Limit(1, per_key_second=rate)})
    handed = run([(gate, keyed_messages(["busy"] * count + ["calm"] * 3))], take, clock, until_ms=60_000)
    busy, calm = times_of(handed, "busy"), times_of(handed, "calm")
    assert len(busy) == count and most_in_one_second(busy) <= rate
    assert max(busy) >= (count - 1) * slot_spacing_us(rate) // 1000  # spaced, not dropped
    alone_clock = Clock()
    alone = FlowGate()
    alone.set_limits(gate.limits)
    assert calm[0] == 0 and calm == [at for at, _ in run([(alone, keyed_messages(["calm"] * 3))], Slots(alone_clock),
                                                          alone_clock, until_ms=60_000)]  # as if alone
    assert {call[1] for call in take.calls} == {"busy", "calm"}  # no endpoint slot taken: it has no rate


def test_a_message_without_a_key_is_limited_by_its_endpoint_only():
    clock = Clock()
    gate, take = FlowGate(), Slots(clock)
    gate.set_limits({"hooks": Limit(1, per_key_second=1, per_key_concurrent=1)})
    go, wait = gate.admit(keyed_messages([None] * 5).due(0, 10), 0, take)
    assert len(go) == 5 and wait == [] and take.calls == []


def test_keys_are_ignored_where_the_endpoint_has_no_per_key_limit():
    clock = Clock()
    gate, take = FlowGate(), Slots(clock)
    gate.set_limits({"hooks": Limit(1, per_second=1000)})
    go, _ = gate.admit(keyed_messages(["a"] * 3).due(0, 10), 0, take)
    assert len(go) == 1 and take.calls == [(1, 3)]  # the endpoint's slots only, as without a key


@pytest.mark.parametrize("at_once", [False, True])
def test_the_endpoints_rate_applies_on_top_of_the_keys(at_once):
    clock = Clock()
    gate, take = FlowGate(), Slots(clock)
    gate.set_limits({"hooks": Limit(1, per_second=10, per_key_second=3)})
    keys = [k for _ in range(12) for k in ("a", "b", "c", "d")]  # 48 messages, 4 keys
    handed = run([(gate, keyed_messages(keys))], take, clock, until_ms=60_000, keys=at_once)
    everything = [at for at, _ in handed]
    assert len(everything) == 48 and most_in_one_second(everything) <= 10
    for key in "abcd":
        assert most_in_one_second(times_of(handed, key)) <= 3
    for at, held in handed:  # never before either slot
        assert at >= held.slot_ms - 0.5 and at >= held.key_slot_ms - 0.5
    if at_once:  # the first look takes the four keys' slots in one call
        assert take.calls[0] == (1, {"a": 1, "b": 1, "c": 1, "d": 1})  # one slot each: 250 ms ahead at most


def test_two_loops_share_a_keys_slots():
    clock = Clock()
    take = Slots(clock)
    loops = [(FlowGate(), keyed_messages(["k"] * 15)) for _ in range(2)]
    for gate, _ in loops:
        gate.set_limits({"hooks": Limit(1, per_key_second=4)})
    handed = run(loops, take, clock, until_ms=60_000)
    assert len(handed) == 30 and most_in_one_second([at for at, _ in handed]) <= 4


def test_calls_in_flight_are_counted_per_key():
    clock = Clock()
    gate, take = FlowGate(), Slots(clock)
    gate.set_limits({"hooks": Limit(1, per_key_concurrent=2)})
    go, wait = gate.admit(keyed_messages(["a", "a", "a", "b", None, None]).due(0, 10), 0, take)
    assert [h.delivery.flow_key for h in go] == ["a", "a", "b", None, None]
    assert [(h.delivery.flow_key, until) for h, until in wait] == [("a", BUSY_RETRY_MS)]
    assert gate.in_flight_keys == {("hooks", "a"): 2, ("hooks", "b"): 1}
    go[0].counted = go[0].counted  # the endpoint itself has no concurrency limit: nothing counted there
    assert not gate.in_flight
    gate.done(go[0])
    gate.done(go[0])  # done twice counts once
    assert gate.in_flight_keys == {("hooks", "a"): 1, ("hooks", "b"): 1}
    for held in go[1:]:
        gate.done(held)
    assert not gate.in_flight_keys  # nothing kept per key once its calls are over
    again, _ = gate.admit([wait[0][0]], BUSY_RETRY_MS, take)
    assert len(again) == 1


def test_a_message_late_for_its_key_slot_takes_a_new_one():
    clock = Clock()
    gate, take = FlowGate(), Slots(clock)
    gate.set_limits({"hooks": Limit(1, per_key_second=5)})
    (held,), _ = gate.admit(keyed_messages(["k"]).due(0, 10), 0, take)
    assert held.key_slot_ms == 0 and not gate.late(held, LATE_SLOT_MS)
    assert gate.late(held, LATE_SLOT_MS + 1)
    assert gate.back(held, LATE_SLOT_MS + 1) == LATE_SLOT_MS + 1 and held.key_slot_ms is None


def test_ten_thousand_keys_take_their_slots_in_one_call_per_endpoint():
    clock = Clock()
    gate, take = FlowGate(), Slots(clock)
    gate.set_limits({"hooks": Limit(1, per_key_second=1)})
    go, wait = gate.admit(keyed_messages([f"k{n}" for n in range(10_000)]).due(0, 10_000), 0, take, take.keys)
    assert len(go) == 10_000 and wait == []  # every key free: all go now
    assert len(take.calls) == 1 and len(take.calls[0][1]) == 10_000

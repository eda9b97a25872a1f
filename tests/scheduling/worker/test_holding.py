"""The delivery loop's timer, with the clock passed in: what is due, in which order, how long
to sleep, postponing after a database outage, giving messages back."""

import pytest

from rabbit import Received
from scheduling.messages.wire import Delivery
from scheduling.worker.holding import Holding


def message(tag: int, queue: str = "billing") -> Received:
    return Received(tag=tag, body=b"", queue=queue)


def holding_of(*due_ms: int, queue: str = "billing") -> Holding:
    holding = Holding()
    for tag, due in enumerate(due_ms, 1):
        holding.hold(message(tag, queue), Delivery(f"m{tag}", 0, due))
    return holding


@pytest.mark.parametrize(("held", "now_ms", "limit", "taken"), [
    ((), 1000, 10, []),
    ((500, 100, 300), 1000, 10, [100, 300, 500]),  # earliest first
    ((500, 100, 300), 300, 10, [100, 300]),  # due at now_ms counts as due
    ((500, 100, 300), 99, 10, []),
    ((500, 100, 300), 1000, 2, [100, 300]),  # a batch is at most `limit`
    ((100, 100, 100), 100, 10, [100, 100, 100]),
])
def test_due_takes_what_is_due_earliest_first(held, now_ms, limit, taken):
    holding = holding_of(*held)
    assert [h.due_ms for h in holding.due(now_ms, limit)] == taken
    assert len(holding) == len(held) - len(taken)


def test_equal_due_times_keep_arrival_order():
    holding = holding_of(100, 100, 100)
    assert [h.message.tag for h in holding.due(100, 10)] == [1, 2, 3]


@pytest.mark.parametrize(("held", "now_ms", "longest", "seconds"), [
    ((), 0, 0.1, 0.1),  # nothing held: the longest wait
    ((1050,), 1000, 0.1, 0.05),  # until the next due time
    ((5000,), 1000, 0.1, 0.1),  # ... but never longer than the longest
    ((900,), 1000, 0.1, 0.0),  # overdue: do not sleep
])
def test_wait_seconds(held, now_ms, longest, seconds):
    assert holding_of(*held).wait_seconds(now_ms, longest) == pytest.approx(seconds)


@pytest.mark.parametrize(("failures", "wait_s"), [(1, 1), (2, 2), (3, 4), (6, 30), (9, 30)])
def test_a_database_outage_holds_the_message_for_the_backoff(failures, wait_s):
    holding = holding_of(100)
    (held,) = holding.due(100, 10)
    held.failures = failures - 1
    assert holding.database_failed(held, now_ms=1000) == wait_s
    assert held.failures == failures and len(holding) == 1
    assert holding.due(1000 + wait_s * 1000 - 1, 10) == []
    assert holding.due(1000 + wait_s * 1000, 10) == [held]


def test_a_broker_failure_holds_the_message_for_the_short_backoff():
    holding = holding_of(100)
    (held,) = holding.due(100, 10)
    assert [holding.broker_failed(held, now_ms=1000), holding.due(1249, 10), holding.due(1250, 10)] == [0.25, [], [held]]
    assert holding.broker_failed(held, now_ms=2000) == 0.5 and held.failures == 2


def test_hold_until_moves_a_message_later():
    holding = holding_of(100, 200)
    first, _ = holding.due(200, 10)
    holding.hold_until(first, 5000)
    assert [h.message.tag for h in holding.due(5000, 10)] == [1]


def test_release_gives_back_one_queues_messages():
    holding = holding_of(100, 200, queue="billing")
    holding.hold(message(9, "audit"), Delivery("m9", 0, 150))
    released = holding.release(lambda h: h.message.queue == "billing")
    assert sorted(h.message.tag for h in released) == [1, 2]
    assert [h.message.tag for h in holding.due(10_000, 10)] == [9]


def test_clear_empties_it():
    holding = holding_of(1, 2, 3)
    assert len(holding.clear()) == 3 and len(holding) == 0 and holding.due(10, 10) == []


def test_ids_due_before_reads_each_message_s_own_due_time_not_its_hold():
    holding = holding_of(100, 200, 900)
    (first,) = holding.due(100, 1)
    holding.database_failed(first, now_ms=150)  # held on to 1,150 ms: still due at 100
    assert holding.ids_due_before(300) == {"m1", "m2"}
    assert holding.ids_due_before(100) == set()


def test_behind_is_how_long_the_earliest_ready_message_has_waited_not_a_postponed_one():
    assert Holding().behind_ms(1000) == 0
    holding = holding_of(100, 900)
    assert holding.behind_ms(50) == 0 and holding.behind_ms(400) == 300
    (first,) = holding.due(400, 1)
    holding.database_failed(first, now_ms=400)  # postponed: ready again later, not waiting for the loop
    assert holding.behind_ms(400) == 0 and holding.behind_ms(1000) == 100

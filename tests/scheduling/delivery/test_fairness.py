"""Round robin over teams, then endpoints; an endpoint at its bulkhead or paused is skipped, not
waited for (head-of-line blocking is the failure to avoid)."""

from scheduling.delivery.fairness import FairQueue


def drain(queue: FairQueue, n: int) -> list:
    taken = []
    for _ in range(n):
        item = queue.pop()
        if item is None:
            break
        taken.append(item)
    return taken


def test_teams_take_turns_whatever_their_number_of_endpoints():
    queue = FairQueue()
    for endpoint in ("a1", "a2", "a3"):
        for n in range(3):
            queue.push(endpoint, "A", f"{endpoint}-{n}", limit=100)
    for n in range(3):
        queue.push("b1", "B", f"b1-{n}", limit=100)
    taken = drain(queue, 6)
    assert [item[0] for item in taken] == ["a", "b", "a", "b", "a", "b"]
    assert [item for item in taken if item.startswith("a")] == ["a1-0", "a2-0", "a3-0"]  # a team's endpoints in turn


def test_an_endpoint_at_its_bulkhead_is_skipped_and_the_others_go_on():
    queue = FairQueue()
    for n in range(10):
        queue.push("slow", "A", f"slow-{n}", limit=2)
    for n in range(3):
        queue.push("fast", "B", f"fast-{n}", limit=2)
    taken = drain(queue, 10)
    assert taken == ["slow-0", "fast-0", "slow-1", "fast-1"]  # both at their limit now
    assert queue.pop() is None
    queue.done("fast")
    assert queue.pop() == "fast-2"
    queue.done("slow")
    assert queue.pop() == "slow-2"


def test_work_conserving_one_busy_endpoint_takes_every_slot():
    queue = FairQueue()
    for n in range(5):
        queue.push("only", "A", n, limit=5)
    assert drain(queue, 10) == [0, 1, 2, 3, 4]
    assert queue.running("only") == 5 and queue.queued("only") == 5


def test_pausing_hands_back_waiting_calls_and_resuming_lets_new_ones_start():
    queue = FairQueue()
    for n in range(4):
        queue.push("e", "A", n, limit=1)
    assert queue.pop() == 0
    assert queue.set_paused("e", True) == [1, 2, 3]
    queue.push("e", "A", 9, limit=1)
    queue.done("e")
    assert queue.pop() is None  # paused
    queue.set_paused("e", False)
    assert queue.pop() == 9


def test_idle_endpoints_are_forgotten():
    queue = FairQueue()
    for n in range(1000):
        queue.push(f"e{n}", "A", n, limit=1)
    for n in range(1000):
        assert queue.pop() == n
        queue.done(f"e{n}")
    assert len(queue) == 0 and queue._endpoints == {} and not queue._turns

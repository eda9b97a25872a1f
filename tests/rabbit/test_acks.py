"""Planning a batch of acks with AMQP's multiple flag (rabbit/acks.py): table-driven, pure."""

import pytest

from rabbit.acks import Unsettled


@pytest.mark.parametrize(
    ("outstanding", "settled_before", "batch", "multiple", "singles"),
    [
        ([1, 2, 3], [], [1, 2, 3], 3, []),  # all of them: one frame
        ([1, 2, 3], [], [2, 3], None, [2, 3]),  # 1 still held: 2 and 3 one by one
        ([1, 2, 3, 4], [], [1, 2, 4], 2, [4]),  # a prefix, then a gap
        ([1, 2, 3, 4], [2], [1, 3], 3, []),  # 2 was rejected on its own: skipped over
        ([5, 6, 7], [], [], None, []),
        ([], [], [], None, []),
        ([3, 1, 2], [], [3, 2, 1], 3, []),  # arrival order does not matter
    ],
)
def test_plan(outstanding, settled_before, batch, multiple, singles):
    unsettled = Unsettled()
    for tag in outstanding:
        unsettled.add(tag)
    for tag in settled_before:
        unsettled.settle(tag)
    assert unsettled.plan_acks(batch) == (multiple, singles)
    assert len(unsettled) == len(outstanding) - len(settled_before) - len(batch)


def test_a_multiple_ack_never_covers_a_tag_still_held():
    """Over many batches in random order, each multiple ack covers only tags acked in it."""
    import random

    rng = random.Random(3)
    unsettled, held = Unsettled(), set()
    for tag in range(1, 2001):
        unsettled.add(tag)
        held.add(tag)
    acked = set()
    while held:
        batch = set(rng.sample(sorted(held), min(len(held), rng.randint(1, 50))))
        multiple, singles = unsettled.plan_acks(batch)
        covered = {t for t in range(1, (multiple or 0) + 1)} - acked
        assert covered <= batch and covered | set(singles) == batch
        acked |= batch
        held -= batch
    assert len(unsettled) == 0

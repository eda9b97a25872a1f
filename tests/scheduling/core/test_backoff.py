"""One doubling rule for every retry: handler attempts and deliveries postponed while the
database is away (the delivery loop and the scheduling.deliver task)."""

import pytest

from scheduling.core import backoff


@pytest.mark.parametrize(("attempt", "first", "cap", "seconds"), [
    # the 2, 4, 8, 16, 32 s of docs/guides/scheduling.md ("Handlers")
    (1, 2.0, None, 2.0), (2, 2.0, None, 4.0), (5, 2.0, None, 32.0),
    (1, 1.0, 30.0, 1.0), (5, 1.0, 30.0, 16.0), (6, 1.0, 30.0, 30.0), (60, 1.0, 30.0, 30.0),
    (3, 0.5, None, 2.0),
])
def test_exponential(attempt, first, cap, seconds):
    assert backoff.exponential(attempt, first=first, cap=cap) == seconds


@pytest.mark.parametrize(("failures", "seconds"), [(1, 1), (2, 2), (3, 4), (5, 16), (6, 30), (100, 30)])
def test_database_outage_waits_double_up_to_thirty_seconds(failures, seconds):
    assert backoff.database(failures) == seconds


def test_attempts_count_from_one():
    with pytest.raises(ValueError, match="counts from 1"):
        backoff.exponential(0, first=1)


@pytest.mark.parametrize(("failures", "seconds"), [(1, 0.25), (2, 0.5), (3, 1), (4, 2), (5, 2), (100, 2)])
def test_a_broker_that_did_not_take_a_handler_task_is_tried_again_within_two_seconds(failures, seconds):
    assert backoff.broker(failures) == seconds

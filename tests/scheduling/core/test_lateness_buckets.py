"""Lateness histograms (the dashboard's per-minute figures): buckets exact below 128 ms and at
most 1.6 % wide above, and the nearest-rank percentile PostgreSQL's percentile_disc gives."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.core.lateness_buckets import EXACT_BELOW_MS, bucket_ms, percentile_ms


def nearest_rank(values: list[int], fraction: float) -> int:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def histogram(values: list[int]) -> list[tuple[int, int, int]]:
    rows: dict[int, list[int]] = {}
    for value in values:
        rows.setdefault(bucket_ms(value), []).append(value)
    return [(bucket, len(seen), max(seen)) for bucket, seen in rows.items()]


@pytest.mark.parametrize(("value", "bucket"), [
    (-3, -3), (0, 0), (1, 1), (127, 127), (128, 128), (129, 128), (255, 254), (256, 256), (259, 256),
    (1000, 1000), (1001, 1000), (8319, 8192), (8320, 8320), (88_368_428, 88_080_384),
])
def test_bucket_lower_bounds(value, bucket):
    assert bucket_ms(value) == bucket


@given(st.integers(min_value=EXACT_BELOW_MS, max_value=2**40))
def test_a_bucket_above_128_ms_is_at_most_a_64th_of_its_value_wide(value):
    bucket = bucket_ms(value)
    assert bucket <= value and (value - bucket) / value < 1 / 64
    assert bucket_ms(bucket) == bucket  # the lower bound is in its own bucket


@given(st.lists(st.integers(min_value=-5, max_value=EXACT_BELOW_MS - 1), min_size=1, max_size=300),
       st.sampled_from([0.5, 0.9, 0.99, 0.999, 1.0]))
def test_below_128_ms_the_percentile_is_exactly_the_nearest_rank(values, fraction):
    assert percentile_ms(histogram(values), fraction) == nearest_rank(values, fraction)


@given(st.lists(st.integers(min_value=0, max_value=10**7), min_size=1, max_size=300),
       st.sampled_from([0.5, 0.99]))
def test_above_the_percentile_is_at_most_1_6_percent_high(values, fraction):
    exact = nearest_rank(values, fraction)
    found = percentile_ms(histogram(values), fraction)
    assert exact <= found <= max(exact, exact * 65 / 64 + 1)


def test_a_bucket_seen_with_one_value_gives_that_value_and_rows_of_one_bucket_add_up():
    # two minutes' rows of the same bucket, as the dashboard sums them
    rows = [(232, 1, 233), (3, 4, 3), (3, 5, 3), (1000 - 8, 1, 1000)]
    assert percentile_ms(rows, 0.5) == 3 and percentile_ms(rows, 0.99) == 1000 and percentile_ms(rows, 0.9) == 233
    assert percentile_ms([], 0.5) is None and percentile_ms([(5, 0, 5)], 0.5) is None

"""Lateness as a histogram: the per-minute delivery figures (DeliveryMinute) keep counts per
bucket instead of every value, so the dashboard reads a day of deliveries in a bounded number of
rows. Pure: the bucket of a value, and the nearest-rank percentile of a histogram.

A bucket holds one millisecond below 128 ms, and 1/64 of a power of two above (128-129 ms,
…, 8,192-8,319 ms: at most 1.6 % wide). Each bucket's row also keeps the largest value it saw,
and a percentile is reported as that largest value of the bucket its rank falls in: exact below
128 ms, and above whenever the bucket saw a single value; otherwise at most 1.6 % high.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

EXACT_BELOW_MS = 128
SIGNIFICANT_BITS = 7  # 2**7 = 128: the buckets above EXACT_BELOW_MS keep 7 significant bits


def bucket_ms(lateness_ms: int) -> int:
    """The lower bound of the bucket of a lateness (negative values are their own buckets)."""
    if lateness_ms < EXACT_BELOW_MS:
        return lateness_ms
    shift = lateness_ms.bit_length() - SIGNIFICANT_BITS
    return lateness_ms >> shift << shift


def percentile_ms(buckets: Iterable[tuple[int, int, int]], fraction: float) -> int | None:
    """Nearest-rank percentile (PostgreSQL's percentile_disc) of (bucket_ms, count, max_ms)
    rows, any order, buckets possibly repeated: the largest value seen in the bucket holding
    the first rank whose cumulative share is >= fraction. None for no values."""
    merged: dict[int, list[int]] = {}
    for bucket, count, largest in buckets:
        entry = merged.setdefault(bucket, [0, largest])
        entry[0] += count
        entry[1] = max(entry[1], largest)
    total = sum(count for count, _ in merged.values())
    if not total:
        return None
    rank = max(1, math.ceil(fraction * total))
    seen = 0
    for bucket in sorted(merged):
        count, largest = merged[bucket]
        seen += count
        if seen >= rank:
            return largest
    raise AssertionError("unreachable: the last bucket holds the last rank")

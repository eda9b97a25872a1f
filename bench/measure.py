"""How benchmarks state their figures: nearest-rank percentiles of a sample, and how idle the
machine was before a run (these 2-core machines are noisy; a busy one says the figures are not
to be trusted)."""

from __future__ import annotations

import time


def percentiles(values: list[float], points=(50, 95, 99)) -> dict:
    """Nearest-rank percentiles plus max (empty input gives Nones)."""
    if not values:
        return {**{f"p{p}": None for p in points}, "max": None}
    ordered = sorted(values)
    out = {f"p{p}": ordered[min(len(ordered) - 1, max(0, -(-p * len(ordered) // 100) - 1))] for p in points}
    out["max"] = ordered[-1]
    return out


def idle_share(seconds: float = 1.0) -> float:
    """Share of CPU time idle over a short sample (from /proc/stat), to judge noise."""
    def sample():
        fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)

    idle1, total1 = sample()
    time.sleep(seconds)
    idle2, total2 = sample()
    return (idle2 - idle1) / max(1, total2 - total1)

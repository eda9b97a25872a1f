"""Counting events in a sliding window: what a rate limit promises (no window above the rate)."""

from __future__ import annotations


def most_in_window(times: list[float], window: float) -> int:
    """The most of ``times`` inside any half-open window [t, t + window)."""
    times, most, start = sorted(times), 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        most = max(most, end - start + 1)
    return most

"""How long to wait before trying again: one doubling rule for every retry in the platform
(handler attempts, deliveries postponed while the database is away)."""

from __future__ import annotations

# The database is away: try a postponed delivery again after 1, 2, 4 ... seconds, at most 30.
DATABASE_FIRST_SECONDS = 1.0
DATABASE_CAP_SECONDS = 30.0


def exponential(attempt: int, *, first: float, cap: float | None = None) -> float:
    """Seconds before retry number ``attempt`` (1 is the first retry): first, 2·first, 4·first …"""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    seconds = first * 2 ** (attempt - 1)
    return seconds if cap is None else min(seconds, cap)


def database(failures: int) -> float:
    """Seconds to wait after the ``failures``-th failed attempt to reach the database."""
    return exponential(failures, first=DATABASE_FIRST_SECONDS, cap=DATABASE_CAP_SECONDS)

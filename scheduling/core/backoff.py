"""How long to wait before trying again: one doubling rule for every retry in the platform
(handler attempts, deliveries postponed while the database or the broker is away)."""

from __future__ import annotations

# The database is away: try a postponed delivery again after 1, 2, 4 ... seconds, at most 30.
DATABASE_FIRST_SECONDS = 1.0
DATABASE_CAP_SECONDS = 30.0


def exponential(attempt: int, *, first: float, cap: float | None = None) -> float:
    """Seconds before retry number ``attempt`` (1 is the first retry): first, 2·first, 4·first …"""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    seconds = first * (1 << (attempt - 1))  # 2 ** (attempt - 1), as an int
    return seconds if cap is None else min(seconds, cap)


# The broker did not take a handler's task (a node lost, a queue's leader being elected): try the
# delivery again after 0.25, 0.5, 1 ... seconds, at most 2; not a handler attempt.
BROKER_FIRST_SECONDS = 0.25
BROKER_CAP_SECONDS = 2.0


def broker(failures: int) -> float:
    """Seconds to wait after the ``failures``-th time the broker did not take a handler's task."""
    return exponential(failures, first=BROKER_FIRST_SECONDS, cap=BROKER_CAP_SECONDS)


def database(failures: int) -> float:
    """Seconds to wait after the ``failures``-th failed attempt to reach the database."""
    return exponential(failures, first=DATABASE_FIRST_SECONDS, cap=DATABASE_CAP_SECONDS)

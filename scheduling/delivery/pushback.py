"""How a receiver's answers steer its endpoint: ``Retry-After`` on a 429 or 503, a circuit opened
by consecutive failures (calls paused, then one probe), and the endpoint disabled when it has
failed for longer than a setting. Pure: the time is passed in; the caller writes the fields
returned to EndpointHealth (delivery/webhook_calls.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime

RETRY_AFTER_STATUSES = frozenset({429, 503})
LONGEST_OPEN = timedelta(minutes=10)  # an open circuit's pause stops doubling here
MAX_HEADER_CHARS = 64  # a longer Retry-After is not a number or a date: ignored


def retry_after_seconds(value: str | None, *, now: datetime, longest: float) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP-date), capped at
    ``longest``; None if absent or unreadable. Linear in the header's (bounded) length."""
    if not value or len(value) > MAX_HEADER_CHARS:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(int(value))
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None or when.tzinfo is None:
            return None
        seconds = (when - now).total_seconds()
    return max(0.0, min(seconds, longest))


@dataclass(frozen=True)
class Health:
    """The fields of EndpointHealth these rules read."""

    consecutive_failures: int = 0
    failing_since: datetime | None = None
    paused_until: datetime | None = None
    circuit_opened: int = 0


def after_success(*, now: datetime) -> dict:
    return {"consecutive_failures": 0, "failing_since": None, "paused_until": None, "circuit_opened": 0,
            "last_success_at": now}


def after_failure(health: Health, *, now: datetime, error: str, retry_after_s: float | None,
                  circuit_failures: int, circuit_seconds: float) -> dict:
    """Count a failed call. The circuit opens at ``circuit_failures`` in a row, and again at each
    failure once it has (the probe failed), for ``circuit_seconds`` doubled per opening up to
    LONGEST_OPEN; a Retry-After pauses at least that long. 0 ``circuit_failures``: never opens.
    While it is open, failures of calls that were already out count but do not open it again."""
    failures = health.consecutive_failures + 1
    paused = now + timedelta(seconds=retry_after_s) if retry_after_s else None
    opened = health.circuit_opened
    is_open = health.paused_until is not None and health.paused_until > now
    if circuit_failures and failures >= circuit_failures and not is_open:
        open_for = min(timedelta(seconds=circuit_seconds) * (2 ** min(opened, 16)), LONGEST_OPEN)
        opened += 1
        paused = max(paused or now, now + open_for)
    if paused is not None and health.paused_until is not None:
        paused = max(paused, health.paused_until)
    return {"consecutive_failures": failures, "failing_since": health.failing_since or now,
            "paused_until": paused if paused is not None else health.paused_until, "circuit_opened": opened,
            "last_failure_at": now, "last_error": error[:2000]}


def should_disable(health: Health, *, now: datetime, disable_after: timedelta | None) -> bool:
    """Failing with no success for longer than ``disable_after`` (None: never)."""
    return (disable_after is not None and health.failing_since is not None
            and now - health.failing_since > disable_after)

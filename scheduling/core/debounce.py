"""Debounce's rules, pure: what a message's ``debounce`` may say, and the due time and window it
gives (messages/debounce.py applies them under a lock per endpoint and key).

- trailing: a newer message with the key replaces the waiting one (``superseded``) and is due
  ``seconds`` after the newest, never later than ``max_seconds`` after the first of the window
  (the cap travels from row to row in ``debounce_until``). A delay asked for is a floor: the
  debounce postpones a message, it never brings one forward. A reschedule of the waiting one is
  held to the cap too (``reschedule_error``): the messages it replaced were superseded on that
  promise.
- leading: the first goes at its time and opens a window of ``seconds``; the others scheduled
  within it end ``superseded`` at once (never delivered). After it, the next opens a new window.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduling.core.text import CONTROL_CHARACTERS, has_control_characters

MAX_KEY_CHARS = 200
FIELDS = frozenset({"key", "seconds", "max_seconds", "mode"})


class Mode(enum.StrEnum):
    TRAILING = "trailing"
    LEADING = "leading"


@dataclass(frozen=True)
class Debounce:
    key: str
    seconds: int
    mode: Mode = Mode.TRAILING
    max_seconds: int | None = None  # trailing only: the cap of a window


def parse(value: object, *, max_delay_s: int) -> tuple[Debounce | None, dict[str, str]]:
    """A request's ``debounce`` -> (Debounce, {}) or (None, errors named ``debounce.<field>``).
    ``max_delay_s``: the endpoint's longest delay, which bounds both durations. None: no debounce."""
    if value is None:
        return None, {}
    if not isinstance(value, dict):
        return None, {"debounce": 'must be an object: {"key": ..., "seconds": ..., "max_seconds": ..., "mode": ...}'}
    errors: dict[str, str] = {}
    unknown = sorted(str(k)[:40] for k in value if k not in FIELDS)
    if unknown:
        errors["debounce"] = f"unknown field(s): {', '.join(unknown)} (known: {', '.join(sorted(FIELDS))})"
    key = value.get("key")
    if (not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_CHARS or has_control_characters(key)
            or key != key.strip()):  # as every string the API takes (api/validation.py), and no outer spaces
        errors["debounce.key"] = (f"must be a string of 1 to {MAX_KEY_CHARS} characters, without "
                                  f"{CONTROL_CHARACTERS} or outer spaces")
    mode = value.get("mode", Mode.TRAILING.value)
    if mode not in [m.value for m in Mode]:
        errors["debounce.mode"] = f"must be one of {', '.join(m.value for m in Mode)}"
        mode = None
    seconds = _seconds(value.get("seconds"), "debounce.seconds", 1, max_delay_s, errors)
    max_seconds = value.get("max_seconds")
    if mode == Mode.LEADING and max_seconds is not None:
        errors["debounce.max_seconds"] = "is for mode trailing only (a leading window lasts seconds)"
    elif mode == Mode.TRAILING:
        if max_seconds is None:
            errors["debounce.max_seconds"] = "required for mode trailing: the cap, so a message is never postponed " \
                                             "forever"
        else:
            max_seconds = _seconds(max_seconds, "debounce.max_seconds", seconds or 1, max_delay_s, errors)
    if errors:
        return None, errors
    assert isinstance(key, str) and seconds is not None  # else each has its error above
    return Debounce(key=key, seconds=seconds, mode=Mode(mode), max_seconds=max_seconds), {}


def _seconds(value: object, field: str, low: int, high: int, errors: dict[str, str]) -> int | None:
    if type(value) is not int:
        errors[field] = "must be a whole number of seconds"
        return None
    if not low <= value <= high:
        floor = "seconds" if field.endswith("max_seconds") else f"{low:,}"
        errors[field] = f"must be from {floor} to {high:,} s (the endpoint's longest delay)"
        return None
    return value


def window_until(debounce: Debounce, *, now: datetime) -> datetime:
    """A new window's end, opened by a message accepted ``now``: trailing, its cap (now +
    max_seconds); leading, the end of the window that supersedes the others (now + seconds)."""
    span = debounce.max_seconds if debounce.mode == Mode.TRAILING else debounce.seconds
    if span is None:
        raise ValueError("a trailing debounce has its cap (max_seconds): parse requires it")
    return now + timedelta(seconds=span)


def trailing_due(*, asked: datetime, now: datetime, seconds: int, until: datetime) -> datetime:
    """The due time of the newest message of a trailing window: ``seconds`` after it, never past the
    window's cap ``until``; and never before the time it asked for itself."""
    return max(asked, min(now + timedelta(seconds=seconds), until))


def leading_open(*, until: datetime | None, now: datetime) -> bool:
    """A leading window that ends at ``until`` still supersedes a message accepted ``now``."""
    return until is not None and now < until


def reschedule_error(*, mode: str | None, until: datetime | None, due_at: datetime) -> str | None:
    """Why a waiting message of a trailing window may not move to ``due_at`` (None: it may): past
    its window's cap ``until``. Refused, not clamped: a due time asked for is never brought forward
    behind the caller's back (the floor rule above), so the caller hears of the cap instead."""
    if mode != Mode.TRAILING or until is None or due_at <= until:
        return None
    return (f"is after the debounce window's cap (debounce.until {until.isoformat().replace('+00:00', 'Z')}: "
            "max_seconds after the window's first message); a trailing message is never due later")

"""Durations as people write them in settings: ``90s``, ``15m``, ``12h``, ``7d`` (pure)."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
OFF = "off"


def parse_duration(value: str, *, name: str) -> timedelta:
    """``7d`` -> 7 days; anything else raises ValueError with one line that names the setting."""
    match = _DURATION_RE.fullmatch(str(value).strip().lower())
    if not match:
        raise ValueError(f"{name} must be a duration such as 90s, 15m, 12h or 7d, not {value!r}")
    try:
        return timedelta(seconds=float(match[1]) * _UNITS[match[2]])
    except OverflowError:
        raise ValueError(f"{name} is too long a duration: {value!r}") from None


def parse_duration_or_off(value: str, *, name: str) -> timedelta | None:
    """As parse_duration, or None for ``off``."""
    if str(value).strip().lower() == OFF:
        return None
    try:
        return parse_duration(value, name=name)
    except ValueError:
        raise ValueError(f"{name} must be a duration such as 90s, 15m, 12h or 7d, or off, not {value!r}") from None


def format_duration(span: timedelta) -> str:
    """The largest whole unit: 7d, 12h, 15m, 90s (settings are echoed back in the words they use)."""
    seconds = span.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"

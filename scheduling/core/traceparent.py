"""W3C Trace Context's ``traceparent``, read strictly and written. Pure (the standard library only).

What a caller sends with a message is checked here once, at the edge, and kept only if it is a
valid version-00 ``traceparent`` (55 characters: ``00-<32 hex trace id>-<16 hex parent id>-<2 hex
flags>``, lower case, neither id all zeros). W3C Trace Context says a receiver that cannot parse
the header ignores it (it starts a new trace): so does the platform, never a 400 for it. Longer
text is refused before the pattern runs (a header is bounded, not read whole).
"""

from __future__ import annotations

import random
import re

LENGTH = 55  # version 00: 2 + 1 + 32 + 1 + 16 + 1 + 2
_FORMAT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16


def parse(value: object) -> str | None:
    """``value`` if it is a valid version-00 traceparent, else None (ignored, as W3C says).
    Surrounding blanks (what an HTTP header may carry) are dropped first."""
    if not isinstance(value, str) or len(value) > LENGTH + 8:
        return None
    value = value.strip()
    match = _FORMAT.fullmatch(value) if len(value) == LENGTH else None
    if match is None or match.group(1) == _ZERO_TRACE or match.group(2) == _ZERO_SPAN:
        return None
    return value


def trace_id(value: str) -> str:
    """The trace id (32 hex) of a valid traceparent."""
    return value[3:35]


def span_id(value: str) -> str:
    """The parent (span) id (16 hex) of a valid traceparent."""
    return value[36:52]


def sampled(value: str) -> bool:
    """Whether the caller recorded its span (the flags' lowest bit)."""
    return bool(int(value[53:55], 16) & 1)


def child(value: str, new_span_id: str | None = None) -> str:
    """The same trace with another span id (a fresh random one unless given): what a hop that
    makes a span of its own sends on."""
    return f"00-{trace_id(value)}-{new_span_id or new_id()}-{value[53:55]}"


def new_id() -> str:
    """A random, non-zero span id (16 hex). Not a secret: Python's generator, as OpenTelemetry's own
    ids are (os.urandom cost ~150 µs a call on this sandboxed machine)."""
    while not (value := random.getrandbits(64)):
        pass
    return f"{value:016x}"

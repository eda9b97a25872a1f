"""An ordering key's turn (issue 49): messages of one endpoint with the same ``ordering_key`` are
handed over one at a time, in due order (ties by creation, then id), each after the one before it
ended (delivered, failed after its retries, cancelled, expired, superseded).

Pure: the delivery path locks the key's turn row, reads what this decides on, and applies the
answer (delivery/ordering.py). Messages without a key never get here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

KEY_MAX_CHARS = 200


class Turn(enum.Enum):
    GO = "go"  # hand it over now
    WAIT = "wait"  # an earlier message of its key has not ended: waiting, woken when it has


@dataclass(frozen=True)
class Holder:
    """The message whose handler may still run for a key (its webhook call is out), until ``until``."""

    message_id: str | None = None
    until: datetime | None = None

    def live(self, now: datetime) -> bool:
        return self.message_id is not None and self.until is not None and self.until > now


def turn(*, mine: str, holder: Holder, earlier_open: bool, now: datetime) -> Turn:
    """GO when no other message holds the key (or its hold has lapsed) and no message of the key due
    before this one is still open (in flight or waiting); WAIT otherwise. The holder being this very
    message (a second copy of a call still out) is not an obstacle here: the call lease decides that."""
    if holder.live(now) and holder.message_id != mine:
        return Turn.WAIT
    return Turn.WAIT if earlier_open else Turn.GO


def key_problem(key) -> str | None:
    """Why a caller's ordering_key is refused, or None: a string of 1 to 200 characters without NUL."""
    if not isinstance(key, str) or not 1 <= len(key) <= KEY_MAX_CHARS or "\x00" in key:
        return f"must be a string of 1 to {KEY_MAX_CHARS} characters, without NUL"
    return None

"""An ordering key's turn (issue 49): messages of one endpoint with the same ``ordering_key`` are
handed over one at a time, in due order (ties by creation, then id), each after the one before it
ended (delivered, failed after its retries, cancelled, expired, superseded).

A recurring schedule's runs with the overlap policy ``skip`` or ``buffer_one`` share the key
``schedule:<schedule key>`` (set by the materialiser, schedules/services.py), and carry the policy:
a run that finds its turn taken (the previous run has not ended) is not sent but SKIPPED (``skip``),
or waits (``buffer_one``) unless another run already waits, in which case it is skipped (Temporal's
BUFFER_ONE: the buffered run keeps its place).

Pure: the delivery path locks the key's turn row, reads what this decides on, and applies the
answer (messages/ordering.py). Messages without a key never get here.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from datetime import datetime

from scheduling.core.text import NUL_CHARACTERS, has_nul

KEY_MAX_CHARS = 200
# the platform's keys: a recurring schedule's runs with an overlap policy (a caller's key may not start so)
SCHEDULE_KEY_PREFIX = "schedule:"


class Overlap(enum.StrEnum):
    """A recurring schedule's policy for a run due while its previous run has not ended."""

    ALLOW = "allow"  # sent anyway (no ordering key: runs may overlap)
    SKIP = "skip"  # not sent: ends skipped
    BUFFER_ONE = "buffer_one"  # waits for the previous run's end; a later one, while one waits, is skipped


class Turn(enum.Enum):
    GO = "go"  # hand it over now
    WAIT = "wait"  # an earlier message of its key has not ended: waiting, woken when it has
    SKIP = "skip"  # a schedule's run whose previous run has not ended, by its overlap policy: ends skipped


@dataclass(frozen=True)
class Holder:
    """The message whose handler may still run for a key (its webhook call is out), until ``until``."""

    message_id: str | None = None
    until: datetime | None = None

    def live(self, now: datetime) -> bool:
        return self.message_id is not None and self.until is not None and self.until > now


def turn(*, mine: str, holder: Holder, earlier_open: bool, now: datetime, overlap: str | None = None,
         buffered: bool = False) -> Turn:
    """GO when no other message holds the key (or its hold has lapsed) and no message of the key due
    before this one is still open (in flight or waiting). Otherwise WAIT, except for a schedule's run
    by its ``overlap``: SKIP under ``skip``, and under ``buffer_one`` when another run of the key
    already waits (``buffered``). The holder being this very message (a second copy of a call still
    out) is not an obstacle here: the call lease decides that."""
    blocked = (holder.live(now) and holder.message_id != mine) or earlier_open
    if not blocked:
        return Turn.GO
    if overlap == Overlap.SKIP or (overlap == Overlap.BUFFER_ONE and buffered):
        return Turn.SKIP
    return Turn.WAIT


def key_problem(key: object, *, platform: bool = False) -> str | None:
    """Why a caller's ordering_key is refused, or None: a string of 1 to 200 characters without NUL,
    not starting ``schedule:`` (the platform's, ``platform``: for its schedules' runs)."""
    if not isinstance(key, str) or not 1 <= len(key) <= KEY_MAX_CHARS or has_nul(key):
        return f"must be a string of 1 to {KEY_MAX_CHARS} characters, without {NUL_CHARACTERS}"
    if key.startswith(SCHEDULE_KEY_PREFIX) and not platform:
        return (f"keys starting {SCHEDULE_KEY_PREFIX!r} are the platform's (its recurring schedules' runs): "
                "choose another")
    return None


def keys_off_problem(*, setting: str, allowed: str | None = None) -> str:
    """Why a caller's ordering key (or a schedule's overlap other than ``allowed``) is refused while the
    setting turns ordering off: a rolling upgrade, whose previous release's workers ignore keys."""
    instead = f"use {str(allowed)!r}, or " if allowed else ""
    return (f"ordering is off ({setting}), for a rolling upgrade whose older workers would ignore it: "
            f"{instead}ask the operator to set {setting} on once every worker runs this release")


def schedule_key(key: str) -> str:
    """The ordering key a recurring schedule's runs share when its overlap is not ``allow`` (a schedule
    key too long for the column keeps its start and a digest of the whole)."""
    whole = f"{SCHEDULE_KEY_PREFIX}{key}"
    if len(whole) <= KEY_MAX_CHARS:
        return whole
    return f"{whole[:KEY_MAX_CHARS - 41]}#{hashlib.sha1(key.encode()).hexdigest()}"


def skip_reason(*, overlap: str, running: str | None, buffered: bool) -> str:
    """last_error of a run skipped by its schedule's overlap policy: which run was still running."""
    run = f"run {running}" if running else "its previous run"
    if overlap == Overlap.BUFFER_ONE and buffered:
        return f"skipped (overlap buffer_one): {run} had not ended and a run was already waiting for it"
    return f"skipped (overlap {overlap}): {run} had not ended"

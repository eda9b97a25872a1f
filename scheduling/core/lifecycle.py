"""A message's life in one place: its statuses, which events move it between them, and lateness.

Pure (no database, no broker, no Django): every writer asks here what a change means and
applies the fields it returns, so the rules are the same for the API, the relay, the delivery
loop, Celery tasks, the migration tools and the unroutable drain.

    pending ──publish──► published ──deliver──► delivered
       │                    │  ▲                  │  │
       │                    │  └──────retry───────┘  └─give up─► failed ──republish──► pending
       ├──cancel──► cancelled ◄──cancel──┘                          ▲
       └──────────────unroutable (also from published)──────────────┘
    unbuildable: pending or published ──► failed (no broker message can be made of the row: the
    relay and the timeout manager fail it alone, with the reason, and publish the rest of the batch)
    reschedule: pending or published ──► pending, due at its new time (published again)
    resend: delivered or failed ──► pending (a person sends it again: a new attempt)
    expire: pending or published ──► expired (past its ``expires_at``: never handed over after it),
    also delivered ──► expired when its handler failed and the retry would land after it
    superseded: a newer message with its debounce key replaced it (debounce's transitions)
    wait: pending or published ──► waiting (an ordering_key's turn is another message's: its copy is
    acked; core/ordering.py), wake: waiting ──► pending (the message before it ended: published anew)
    skip: pending, published or waiting ──► skipped (a recurring schedule's run whose overlap policy
    says not to run it: the schedule's previous run had not ended; core/ordering.py)

``deliver`` is taken *before* the handler runs, so a second copy of the message in the same
batch (or transaction) already sees ``delivered`` and is a duplicate: the handler runs once per
message id and attempt. A failing handler then takes ``retry`` (its next attempt is published)
or ``give up``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from scheduling.core.clock import MS, to_epoch_ms


class Status(enum.StrEnum):
    PENDING = "pending"  # saved; the outbox: the relay publishes it
    PUBLISHED = "published"  # in the broker (cascade, endpoint queue or a worker's hold)
    DELIVERED = "delivered"  # handed to its endpoint; the handler ran or is running
    CANCELLED = "cancelled"
    FAILED = "failed"  # the handler gave up, or the broker could not route it
    EXPIRED = "expired"  # not handed over by its expires_at: never will be (never retried)
    SUPERSEDED = "superseded"  # replaced by a newer message with its debounce key
    WAITING = "waiting"  # due, but an earlier message of its ordering key has not ended yet (woken after)
    SKIPPED = "skipped"  # a schedule's run not sent: its previous run had not ended (its overlap policy)


# Waiting to be delivered: what the relay may still publish, a cancel may still stop, and the
# accuracy report counts as in flight (or lost, once overdue by its grace).
IN_FLIGHT = frozenset({Status.PENDING, Status.PUBLISHED})
# Done, for now: ``finished_at`` says since when, and the prune archives and removes the row once
# its retention has passed (a failed one can still be republished until then).
FINISHED = frozenset({Status.DELIVERED, Status.CANCELLED, Status.FAILED, Status.EXPIRED, Status.SUPERSEDED,
                      Status.SKIPPED})
# The final statuses added after the history index (message_endpoint_history lists the first three
# by value): their rows have an index of their own with the same fields (message_endpoint_ended).
LATER_FINISHED = frozenset({Status.EXPIRED, Status.SUPERSEDED, Status.SKIPPED})
# As stored: the partial indexes' conditions (models/messages.py) and the reads that pick an index by them.
IN_FLIGHT_VALUES = frozenset(status.value for status in IN_FLIGHT)
FINISHED_VALUES = frozenset(status.value for status in FINISHED)
LATER_FINISHED_VALUES = frozenset(status.value for status in LATER_FINISHED)
# Not ended, for an ordering key's turn: in flight or waiting for its turn. Kept apart from IN_FLIGHT,
# whose values are the condition of four partial indexes (changing it would rebuild them).
ORDER_OPEN = IN_FLIGHT | {Status.WAITING}
ORDER_OPEN_VALUES = frozenset(status.value for status in ORDER_OPEN)
# The finished statuses grouped by the partial index that holds their rows (message_endpoint_history,
# message_endpoint_ended): a read that states its statuses states one group per part.
FINISHED_BY_INDEX = (FINISHED_VALUES - LATER_FINISHED_VALUES, LATER_FINISHED_VALUES)


def sql_list(statuses: Iterable[str]) -> str:
    """Statuses as raw SQL's list of literals, sorted (``'pending', 'published'``): a query's
    ``status IN (...)`` written from the names here, the same text every time (so a partial
    index whose condition lists them is still picked). The values are this enum's own words:
    nothing to escape, no caller's text."""
    return ", ".join(f"'{Status(status).value}'" for status in sorted(statuses))


class Event(enum.StrEnum):
    SCHEDULE = "schedule"
    PUBLISH = "publish"
    DELIVER = "deliver"
    DUPLICATE = "duplicate"
    RETRY = "retry"
    GIVE_UP = "give up"
    UNROUTABLE = "unroutable"
    UNBUILDABLE = "unbuildable"
    CANCEL = "cancel"
    REPUBLISH = "republish"
    RESCHEDULE = "reschedule"
    RESEND = "resend"
    EXPIRE = "expire"
    SUPERSEDE = "supersede"  # a newer message with its debounce key replaced it (messages/debounce.py)
    WAIT = "wait"  # due, not its ordering key's turn: acked, waits for the message before it to end
    WAKE = "wake"  # the message before it ended: pending again, published by the relay
    SKIP = "skip"  # a schedule's run its overlap policy does not send (the previous run has not ended)


NEW = None  # the "status" of a message before it exists
P, U, D, C, F = Status.PENDING, Status.PUBLISHED, Status.DELIVERED, Status.CANCELLED, Status.FAILED
X, W = Status.EXPIRED, Status.WAITING
TRANSITIONS: dict[Event, dict[Status | None, Status]] = {
    Event.SCHEDULE: {NEW: P},
    Event.PUBLISH: {P: U, U: U},  # published again: moved to another cascade or broker
    Event.DELIVER: {P: D, U: D, W: D},  # pending: the broker handed it over before the relay's commit
    Event.DUPLICATE: {s: s for s in Status},  # counted, nothing else changes
    Event.RETRY: {D: U},
    Event.GIVE_UP: {D: F},
    Event.UNROUTABLE: {P: F, U: F},
    Event.UNBUILDABLE: {P: F, U: F},
    Event.CANCEL: {P: C, U: C, W: C, C: C},
    Event.REPUBLISH: {F: P},
    Event.RESCHEDULE: {P: P, U: P, W: P},  # pending again: its copy for the new time is published anew
    Event.RESEND: {D: P, F: P},  # a person's resend: delivered (or failed) once more, a new attempt
    Event.EXPIRE: {P: X, U: X, W: X, D: X},  # delivered: its handler failed and the retry would be too late
    Event.SUPERSEDE: {P: Status.SUPERSEDED, U: Status.SUPERSEDED},  # never delivered: its copy is dropped
    Event.WAIT: {P: W, U: W},
    Event.WAKE: {W: P},
    Event.SKIP: {P: Status.SKIPPED, U: Status.SKIPPED, W: Status.SKIPPED},
}


class IllegalTransition(ValueError):
    """The event cannot happen to a message in this status (e.g. cancelling a delivered one)."""


def transition(status: Status | str | None, event: Event) -> Status:
    try:
        return TRANSITIONS[event][status if status is None else Status(status)]
    except (KeyError, ValueError):
        raise IllegalTransition(f"a {status or 'new'} message cannot take {event.value!r}") from None


def sources(event: Event) -> frozenset[Status]:
    """Statuses the event may start from: the WHERE of a compare-and-set UPDATE."""
    return frozenset(s for s in TRANSITIONS[event] if s is not None)


def lateness_ms(due_at: datetime, at: datetime, *, accepted_at: datetime | None = None) -> int:
    """How late ``at`` is, in whole milliseconds (negative: early), counted from the later of the
    due time and the time the platform accepted the message: a message asked for in the past can
    not be delivered before it arrives, and counting from the past time would report the client's
    backdating as the platform's lateness (one such row can set p99 to days)."""
    return (at - max(due_at, accepted_at or due_at)) // MS


def scheduled_in_past(due_at: datetime, accepted_at: datetime) -> bool:
    """Asked for a time strictly before it was accepted (delivered at once, counted apart). No
    tolerance: both are whole milliseconds and a delay of 0 makes them equal, so it is not."""
    return due_at < accepted_at


# --- a hand-over by the broker ------------------------------------------------------------------

_DELIVERABLE = sources(Event.DELIVER)


class Arrival(enum.Enum):
    DELIVER = "deliver"  # run the handler (of this attempt)
    DUPLICATE = "duplicate"  # already delivered (or another attempt is current): drop it
    CANCELLED = "cancelled"  # cancelled while it waited: drop it
    SUPERSEDED = "superseded"  # a copy for a due time the message no longer has (rescheduled): drop it
    EXPIRED = "expired"  # past its expires_at (expired now, or already): drop it, never hand it over


class Change(TypedDict, total=False):
    """What a rule changes on a message row, by field (only those it changes): set by ``apply``, or
    the kwargs of an UPDATE."""

    status: Status
    attempts: int
    delivery_count: int
    last_error: str
    finished_at: datetime | None
    delivered_at: datetime | None
    lateness_ms: int | None
    throttled_ms: int
    delivered_by: str
    cancelled_at: datetime
    due_at: datetime
    due_history: list[dict[str, str]]
    published_at: None
    waiting_since: datetime


@dataclass(frozen=True)
class State:
    """The fields of a message the lifecycle reads (a model row has them all)."""

    status: str
    due_at: datetime  # the requested time (kept as asked, even in the past)
    attempts: int = 0
    delivery_count: int = 0
    created_at: datetime | None = None  # when the platform accepted it; None: at due_at
    expires_at: datetime | None = None  # never handed over from then on; None: never expires


def arrive(state: State, *, attempt: int, now: datetime, redelivered: bool = False,
           rerun_redelivered: bool = False, max_reruns: int | None = None, by: str | None = None,
           throttled_ms: int | None = None) -> tuple[Arrival, Change]:
    """What to do with a hand-over of ``attempt`` (0: the copy that came through the cascade;
    n: the n-th handler retry) and the fields to record. Every copy of attempt 0 counts in
    ``delivery_count``, so duplicates the broker made stay visible. ``rerun_redelivered``: a
    Celery task with acks_late runs again when its worker died mid-run (the broker marks the
    copy redelivered), as Celery would without the platform. ``by``: the worker that received
    it, recorded with the delivery (which worker of several delivered a message). ``max_reruns``:
    how many reruns a delivered task gets (None: no bound); every hand-over after the first counts
    (``delivery_count``), so a task whose worker keeps dying, or a caller claiming "redelivered" over
    and over, runs at most 1 + max_reruns times: the copy past that gives up (failed, with the
    reason) and does not run. ``throttled_ms``:
    how long its endpoint's flow control held it back, recorded so that the wait is told apart
    from lateness (the report and the metrics subtract it). A copy for a
    due time the message no longer has is told apart before this, by ``superseded``."""
    if state.status == Status.EXPIRED:
        return Arrival.EXPIRED, {}  # acked, nothing else
    if state.status == Status.SUPERSEDED:  # a newer message with its debounce key replaced it: drop it
        return Arrival.SUPERSEDED, {}
    if state.status in _DELIVERABLE and attempt == state.attempts and expired(state, now=now):
        return Arrival.EXPIRED, expire(state, now=now)
    counted: Change = {"delivery_count": state.delivery_count + 1} if attempt == 0 else {}
    if state.status == Status.CANCELLED:
        return Arrival.CANCELLED, counted
    if state.status in _DELIVERABLE and attempt == state.attempts:
        change: Change = {**counted, "status": transition(state.status, Event.DELIVER), "finished_at": now}
        if attempt == 0:
            late = lateness_ms(state.due_at, now, accepted_at=state.created_at)
            change |= {"delivered_at": now, "lateness_ms": late}
            if throttled_ms:
                change["throttled_ms"] = throttled_ms
            if by is not None:
                change["delivered_by"] = by
        return Arrival.DELIVER, change
    if rerun_redelivered and redelivered and state.status == Status.DELIVERED:
        if max_reruns is None or state.delivery_count <= max_reruns:
            return Arrival.DELIVER, counted
        return Arrival.DUPLICATE, {**counted, "status": transition(state.status, Event.GIVE_UP), "finished_at": now,
                                   "last_error": f"handed over {state.delivery_count + 1} times: past the {max_reruns} "
                                                 f"rerun(s) a task gets after its worker died"}
    return Arrival.DUPLICATE, counted


def superseded(state: State, *, attempt: int, due_ms: int | None) -> bool:
    """A copy that came through the cascade for a due time the message no longer has: it was
    rescheduled after this copy was published, and a copy for its new time is on its way. Such a
    copy is not a hand-over (nothing is counted: once the message is delivered, it is no
    duplicate either) and it must not wait for the new time in a worker's memory. Retries
    (attempt > 0) carry their backoff's time, not the due time."""
    return attempt == 0 and due_ms is not None and due_ms != to_epoch_ms(state.due_at)


def handler_failed(state: State, *, error: str, max_retries: int, now: datetime,
                   retry_at: datetime | None = None) -> tuple[Event, Change]:
    """After a delivered message's handler raised: another attempt (RETRY: in flight again),
    GIVE_UP (finished now), or EXPIRE when the retry, due at ``retry_at`` (None: now), would come
    at or after the message's ``expires_at``: an expired message is never retried."""
    attempts = state.attempts + 1
    event = Event.GIVE_UP if attempts > max_retries else Event.RETRY
    last_error = f"handler attempt {attempts}: {error}"[:2000]
    if event is Event.RETRY and expired(state, now=retry_at or now):
        return Event.EXPIRE, {**expire(state, now=now), "attempts": attempts,
                              "last_error": f"{last_error}; {_expired_reason(state)}"[:2000]}
    return event, {"status": transition(state.status, event), "attempts": attempts, "last_error": last_error,
                   "finished_at": now if event is Event.GIVE_UP else None}


# --- expiry -------------------------------------------------------------------------------------


def expired(state: State, *, now: datetime) -> bool:
    """Past its ``expires_at`` (at it counts as past: "not handed over after it" leaves no instant)."""
    expires_at = getattr(state, "expires_at", None)
    return expires_at is not None and now >= expires_at


def _expired_reason(state: State) -> str:
    if state.expires_at is None:
        raise ValueError("a message without an expires_at never expires")
    return f"expired at {state.expires_at.isoformat().replace('+00:00', 'Z')} before it was handed over"


def expire(state: State, *, now: datetime) -> Change:
    """Past its ``expires_at`` before it was handed over: expired, final, the reason in last_error
    (from pending, published, or delivered whose retry would be too late)."""
    return {"status": transition(state.status, Event.EXPIRE), "finished_at": now, "last_error": _expired_reason(state)}


def expiry_valid(*, due_at: datetime, expires_at: datetime | None) -> bool:
    """An expiry must come after the due time (one at or before it could never be delivered)."""
    return expires_at is None or expires_at > due_at


def retry_unsent(state: State, *, attempt: int) -> Change:
    """The retry of ``attempt`` was recorded but the broker never confirmed its message (the
    connection died): forget the attempt, so the unacked copy the broker hands back is delivered
    again instead of being taken for an old duplicate and the message lost. {} if the row has
    moved on (the retry did arrive, or someone cancelled it)."""
    if state.status == Status.PUBLISHED and state.attempts == attempt and attempt > 0:
        return {"attempts": attempt - 1}
    return {}


# --- what people do ----------------------------------------------------------------------------


def cancel(state: State, *, now: datetime) -> Change:
    """Cancelling twice changes nothing; cancelling a delivered or failed message is illegal."""
    if state.status == Status.CANCELLED:
        return {}
    return {"status": transition(state.status, Event.CANCEL), "cancelled_at": now, "finished_at": now}


def republish(state: State) -> Change:
    """A failed message starts over at its original due time: its handler attempts and the
    delivery it may have had are forgotten (the broker's hand-overs stay counted)."""
    return {"status": transition(state.status, Event.REPUBLISH), "attempts": 0, "delivered_at": None,
            "lateness_ms": None, "finished_at": None}


def resend(state: State) -> Change:
    """A delivered (or failed) message sent again, as republish sends a failed one: pending at its
    original due time (so at once), its handler attempts and its delivery forgotten (the broker's
    hand-overs stay counted, and its attempts stay listed). Illegal while it is in flight or
    once cancelled: nothing was sent to send again."""
    return {"status": transition(state.status, Event.RESEND), "attempts": 0, "delivered_at": None,
            "lateness_ms": None, "finished_at": None}


def reschedule(state: State, *, due_at: datetime, now: datetime, history: list[dict[str, str]] | None) -> Change:
    """Move a pending or published message to ``due_at``: pending again (the relay publishes a copy
    for the new time; a copy for the old one is superseded when it arrives), the old due time kept
    in ``due_history``. Illegal once delivered, cancelled or failed."""
    status = transition(state.status, Event.RESCHEDULE)
    moved = {"due_at": state.due_at.isoformat().replace("+00:00", "Z"), "moved_at": now.isoformat().replace("+00:00", "Z")}
    return {"status": status, "due_at": due_at, "published_at": None, "due_history": [*(history or []), moved]}


def wait(state: State, *, now: datetime) -> Change:
    """Due, but an earlier message of its ordering key has not ended: waiting from ``now`` (kept once
    woken, so the wait stays visible); its copy is acked and nothing is counted as a hand-over."""
    if getattr(state, "waiting_since", None) is not None:
        return {"status": transition(state.status, Event.WAIT)}
    return {"status": transition(state.status, Event.WAIT), "waiting_since": now}


def wake(state: State) -> Change:
    """The message before it ended: pending again, for the relay to publish (lateness keeps counting
    from its due time: the wait is part of it)."""
    return {"status": transition(state.status, Event.WAKE), "published_at": None}


def skip(state: State, *, now: datetime, reason: str) -> Change:
    """A schedule's run that found its schedule's previous run not ended, under the overlap policy
    ``skip`` (or ``buffer_one`` with a run already waiting): finished, never handed over, the reason
    (which run was still running) in last_error."""
    return {"status": transition(state.status, Event.SKIP), "finished_at": now, "last_error": reason}


def supersede(state: State, *, now: datetime) -> Change:
    """A newer message with the same debounce key replaced this one (trailing), or it came within a
    leading window: finished, never delivered; a copy of it still in the cascade is dropped on arrival."""
    return {"status": transition(state.status, Event.SUPERSEDE), "finished_at": now}


def unroutable(*, reason: str, now: datetime) -> Change:
    """The broker could not route it to any endpoint queue: failed, with the reason (from
    pending or published: the WHERE of the caller's UPDATE is ``sources(Event.UNROUTABLE)``)."""
    return {"status": transition(Status.PUBLISHED, Event.UNROUTABLE), "last_error": reason, "finished_at": now}


def unbuildable(*, reason: str, now: datetime) -> Change:
    """No broker message can be built of it (its payload is not what its endpoint's wire takes,
    say after its handler changed): failed, with the reason, ready to republish once fixed (from
    pending or published: the WHERE of the caller's UPDATE is ``sources(Event.UNBUILDABLE)``)."""
    return {"status": transition(Status.PENDING, Event.UNBUILDABLE), "last_error": reason, "finished_at": now}


def apply(row: object, change: Mapping[str, object]) -> list[str]:
    """Set the changed fields on a row; returns their names (for ``save(update_fields=...)``)."""
    for name, value in change.items():
        setattr(row, name, value)
    return list(change)

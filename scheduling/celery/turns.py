"""Ordering keys on celery_queue endpoints (issue 49): the claim takes the key's turn, the task's end
gives it back (messages/ordering.py holds the turns; core/ordering.py the rules).

A celery_queue task is handed over by the cascade straight into its Celery queue, so its turn cannot
be decided where the copy comes out: it is decided where the worker claims it (the platform's own
hook, celery/claim.py, or a team's worker through ``POST /api/messages/<id>/claim/``). GO: the task
runs and holds the key (a lease of TASK_LEASE_SECONDS, as celery_task's) until its end is reported
(task_postrun here, ``POST /api/messages/<id>/ended/`` from a team's worker). WAIT: the row is set
waiting and the copy is skipped; the wake republishes it once the one before it ended. SKIP: a
schedule's run its overlap policy does not send ends skipped.

A retry of a keyed task delayed through the platform is a row of its own, without a key (its
idempotency key ``<task id>#retry<n>``, celery/services.py ``_key``): its run holds its first run's
turn (``holder_of``), so that its end, not the first run's, gives the key back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduling.core import lifecycle
from scheduling.core.ordering import Turn
from scheduling.delivery.overlap import schedule_count_overlap_skipped
from scheduling.messages.ordering import TASK_LEASE_SECONDS, ordering_hold, ordering_take
from scheduling.models import ScheduledMessage
from scheduling.observability import metrics

RETRY_MARK = "#retry"  # celery/services.py _key and the client's idempotency_key: <task id>#retry<n>


@dataclass(frozen=True)
class Taken:
    """A keyed claim's turn: ``turn`` as decided, ``counted`` what the metrics count."""

    turn: Turn
    counted: list


def take_turn(message: ScheduledMessage, *, now: datetime) -> Taken:
    """The turn of a keyed message being claimed (its row locked by the caller, in its transaction):
    GO holds the key for the task's run; WAIT sets the row waiting (a stray copy of a waiting row
    leaves it as it is); SKIP ends it skipped with the reason. The caller applies its own arrival on
    GO only."""
    decision = ordering_take(candidates=[message], now=now, chain=False)[str(message.id)]
    if decision.turn is Turn.GO:
        until = now + timedelta(seconds=TASK_LEASE_SECONDS)
        ordering_hold(held=[(message.endpoint_id, message.ordering_key, str(message.id), until)])
        return Taken(Turn.GO, [])
    if decision.turn is Turn.SKIP:
        message.save(update_fields=lifecycle.apply(message, lifecycle.skip(message, now=now, reason=decision.reason)))
        return Taken(Turn.SKIP, schedule_count_overlap_skipped(runs=[message]))
    if message.status not in lifecycle.sources(lifecycle.Event.WAIT):
        return Taken(Turn.WAIT, [])  # waiting already, or a rerun of a delivered task whose key moved on
    message.save(update_fields=lifecycle.apply(message, lifecycle.wait(message, now=now)))
    return Taken(Turn.WAIT, [metrics.Counted(metrics.ORDERING_WAITS, message)])


def holder_of(message: ScheduledMessage) -> str | None:
    """The id of the message whose key's turn this task's run holds: its own if it has a key; for a
    retry row without one (``<task id>#retry<n>``), its first run's (``<task id>`` on the same
    endpoint) if that one has a key; else None. One indexed read (unique_idempotency_key_per_endpoint),
    on retries only."""
    if message.ordering_key is not None:
        return str(message.id)
    key = message.idempotency_key or ""
    if RETRY_MARK not in key:
        return None
    first = key.rsplit(RETRY_MARK, 1)[0]
    found = ScheduledMessage.objects.filter(endpoint_id=message.endpoint_id, idempotency_key=first,
                                            ordering_key__isnull=False).values_list("id", flat=True).first()
    return str(found) if found else None

"""Celery tasks delayed through the cascade: each is a ScheduledMessage row on the endpoint of
its queue (handler ``celery_queue``), whose payload is the task message exactly as apply_async
built it. The row is the outbox and the record: cancellable by task id, counted in reports."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from uuid_utils.compat import uuid7

from scheduling.celery.turns import holder_of, take_turn
from scheduling.config.conf import conf, setting_name
from scheduling.core import lifecycle
from scheduling.core.caller import PLATFORM, Caller
from scheduling.core.errors import BulkValidationError, Conflict, NotFound
from scheduling.core.lifecycle import IN_FLIGHT, Arrival, Status
from scheduling.core.ordering import Turn
from scheduling.core.roles import Action
from scheduling.delivery.log import delivery_log_on_commit
from scheduling.delivery.minutes import delivery_minute_record
from scheduling.delivery.orphans import Carried, orphan_copy_set_aside
from scheduling.endpoints.selectors import endpoint_get_one
from scheduling.endpoints.services import endpoint_create
from scheduling.messages.ordering import Release, ordering_task_ended
from scheduling.messages.services import message_cancel, message_lock, message_schedule_many
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.notifications.services import notification_emit_ended
from scheduling.observability import metrics
from scheduling.teams.selectors import team_pick

log = logging.getLogger(__name__)


def celery_queue_ensure_endpoint(*, queue: str) -> Endpoint:
    """The endpoint bound for a Celery queue, created on first use (in the default team, bound to
    the queue's exact name, as only the platform's own code and operators may). The queue keeps its
    usual Celery declaration, so its workers need no change."""
    endpoint = Endpoint.objects.select_related("topology", "team").filter(queue=queue).first()
    if endpoint is None:
        try:
            with transaction.atomic():
                endpoint = endpoint_create(name=queue, queue=queue, handler=Endpoint.Handler.CELERY_QUEUE,
                                           check_quota=False)
        except ValidationError as exc:
            if Endpoint.objects.filter(queue=queue).exists():  # created concurrently
                return celery_queue_ensure_endpoint(queue=queue)
            raise ValueError(f"cannot delay tasks for queue {queue!r}: {exc.messages[0]}") from None
    if endpoint.handler != Endpoint.Handler.CELERY_QUEUE:
        raise ValueError(f"queue {queue!r} is the endpoint of another handler ({endpoint.handler})")
    return endpoint


def _key(task_id: str, retries: int) -> str:
    """Scheduling the same task id twice yields one row; a retry of it is a new one."""
    return task_id if not retries else f"{task_id}#retry{retries}"


def celery_task_schedule(*, queue: str, task_id: str, retries: int, due_at: datetime, captured: dict) -> ScheduledMessage:
    endpoint = celery_queue_ensure_endpoint(queue=queue)
    try:
        row_id = uuid.UUID(task_id) if not retries else uuid7()
    except ValueError:
        row_id = uuid7()
    item = {"endpoint": endpoint, "payload": {"celery": captured}, "deliver_at": due_at,
            "idempotency_key": _key(task_id, retries), "id": row_id, "captured_task": True}
    try:
        (result,) = message_schedule_many(items=[item])
    except BulkValidationError as exc:
        raise ValidationError(exc.errors[0]) from None
    except IntegrityError:  # the same UUID task id used on another queue
        item["id"] = uuid7()
        (result,) = message_schedule_many(items=[item])
    return result.message


def celery_task_cancel(*, task_id: str, caller: Caller = PLATFORM, endpoint: str | None = None,
                       team: str | None = None) -> int:
    """Cancel every waiting run of a task id (its first run, keyed ``<task id>``, and its delayed
    retries, ``<task id>#retry<n>``) in the teams where ``caller`` may cancel: the count
    cancelled. Unlike Celery's revoke, this is stored: it survives worker restarts. ``endpoint``
    (a ``celery_queue`` endpoint's name) narrows the search to its messages in flight, read
    through its index; ``team`` to one of the caller's teams (needed for an endpoint name several
    of them use). ValidationError on ``team`` or ``endpoint`` for one the caller cannot name."""
    team_ids = caller.team_ids(Action.CANCEL)
    if team:
        team_ids = frozenset({team_pick(caller=caller, action=Action.CANCEL, name=team).pk})
    rows = ScheduledMessage.objects.filter(
        Q(idempotency_key=task_id) | Q(idempotency_key__startswith=f"{task_id}#retry"),
        status__in=IN_FLIGHT,
    )
    if endpoint is not None:
        rows = rows.filter(endpoint=_task_endpoint(endpoint, team_ids))
    else:
        rows = rows.filter(endpoint__handler=Endpoint.Handler.CELERY_QUEUE)
        if team_ids is not None:
            rows = rows.filter(endpoint__team_id__in=team_ids)
    cancelled = 0
    for row_id in list(rows.values_list("id", flat=True)):
        try:
            cancelled += message_cancel(message_id=row_id, caller=caller).status == Status.CANCELLED
        except Conflict:  # it ran meanwhile (a cancel after the claim): nothing left to cancel
            pass
    return cancelled


def _task_endpoint(name: str, team_ids: frozenset[int] | None) -> Endpoint:
    """The ``celery_queue`` endpoint of this name in these teams (None: any), or ValidationError."""
    endpoint = endpoint_get_one(name=name, team_ids=team_ids)
    if endpoint is None:
        raise ValidationError({"endpoint": f"no endpoint {name!r} in your teams"})
    if endpoint.handler != Endpoint.Handler.CELERY_QUEUE:
        raise ValidationError({"endpoint": f"endpoint {name!r} is not a celery_queue endpoint"})
    return endpoint


@dataclass(frozen=True)
class Claim:
    message: ScheduledMessage | None  # None: no row (the platform's own hook sets the copy aside, not run)
    run: bool
    # the message whose ordering key's turn the run holds (its own, or a retry's first run: celery/turns.py):
    # its end must be reported (task_postrun, POST /api/messages/<id>/ended/); None: no key, nothing to report
    ordered: str | None = None


def celery_task_claim(*, message_id: str, redelivered: bool, by: str = "", caller: Caller = PLATFORM,
                      carried: Carried | None = None) -> bool:
    """Called in the worker before a task that came out of the cascade starts (any task class:
    scheduling.celery.claim hooks every task's before_start; another codebase's worker through
    ``POST /api/messages/<id>/claim/``): record the delivery and say whether to run. A cancelled
    task, or a duplicate hand-over of one that already ran, is skipped; a redelivery after a
    worker crash (acks_late) runs again, as Celery would."""
    return celery_task_claim_message(message_id=message_id, redelivered=redelivered, by=by, caller=caller,
                                     carried=carried).run


def celery_task_claim_message(*, message_id: str, redelivered: bool, by: str = "",
                              caller: Caller = PLATFORM, carried: Carried | None = None) -> Claim:
    """celery_task_claim, answering the row as well (its status after the claim). ``caller`` needs
    the tasks right in the message's team: another team's message, or an unknown id, is NotFound
    (the platform's own hook sets a task with no row aside with what it ``carried``,
    delivery/orphans.py, and skips it), and a message that is not a Celery task (its endpoint not
    ``celery_queue``) a Conflict. So is a claim of a message still waiting more
    than DELAY_CLAIM_MARGIN_MS before its due time: the cascade hands a task over when it is due,
    so such a claim is no hand-over, and taking it would deliver the row and skip the real run (a
    cancel without the cancel right). The platform's own hook is not refused: only the platform
    publishes into its workers' queues. A redelivered task reruns at most DELAY_TASK_MAX_RERUNS
    times (lifecycle.arrive), then fails instead of running. A message with an ordering key runs
    in its key's turn only (celery/turns.py): otherwise it is set waiting (or, a schedule's run, ends
    skipped) and not run; ``ordered`` names the message whose turn a run holds."""
    settings = conf()
    with transaction.atomic():
        try:
            message = message_lock(message_id=message_id, caller=caller, action=Action.TASKS)
        except NotFound:
            if caller is not PLATFORM:
                raise
            # not run blind: a task whose row is gone (a restore from backup) is kept for the operator
            orphan_copy_set_aside(copies=[carried or Carried(message_id, 0, "")], by=by)
            return Claim(message=None, run=False)
        if message.endpoint.handler != Endpoint.Handler.CELERY_QUEUE:
            raise Conflict(f"message {message.id} is not a Celery task (its endpoint {message.endpoint.name!r} is "
                           f"a {message.endpoint.handler} endpoint)")
        was, now = message.status, timezone.now()
        if caller is not PLATFORM and was in IN_FLIGHT \
                and now < message.due_at - timedelta(milliseconds=settings.claim_margin_ms):
            raise Conflict(f"message {message.id} is due at {message.due_at.isoformat()}: a claim more than "
                           f"{settings.claim_margin_ms} ms before that is refused "
                           f"({setting_name('claim_margin_ms')}); claim it when the task comes out of the cascade")
        arrival, change = lifecycle.arrive(message, attempt=0, now=now, redelivered=redelivered,
                                           rerun_redelivered=True, max_reruns=settings.task_max_reruns, by=by)
        if arrival is Arrival.DELIVER and message.ordering_key is not None:
            taken = take_turn(message, now=now)  # before the arrival is applied: WAIT and SKIP record no delivery
            if taken.turn is not Turn.GO:
                metrics.record_on_commit(taken.counted)
                return Claim(message=message, run=False)
        message.save(update_fields=lifecycle.apply(message, change))
        if arrival is Arrival.DELIVER and was != Status.DELIVERED:  # a rerun after a crash is not a new delivery
            delivery_minute_record(messages=[message])
        if not message.notification:  # its outcome told (a callback; past its reruns: message.failed; expired)
            ended = message.status if message.status != was else None
            notification_emit_ended(
                delivered=[message.id] if ended == Status.DELIVERED and message.on_delivered_id else [],
                failed=[message.id] if ended == Status.FAILED else [],
                expired=[message.id] if ended == Status.EXPIRED else [])
        metrics.record_on_commit([metrics.arrival(arrival, message, change)])
    if arrival is not Arrival.DELIVER:
        return Claim(message=message, run=False)
    delivery_log_on_commit(messages=[message], by=by)
    return Claim(message=message, run=True, ordered=holder_of(message))


def celery_task_end(*, message_id: str, retrying: bool, caller: Caller = PLATFORM) -> tuple[ScheduledMessage, str]:
    """A worker of another codebase reports that a claimed task ended (``POST
    /api/messages/<id>/ended/``; the platform's own workers report it by task_postrun, claim.py):
    if its run holds an ordering key's turn (its own key, or a retry's first run's), the key is let
    go and the next message of the key woken; ``retrying`` keeps it for another lease. Anything else
    (no key, a turn not its own any more, a second report) changes nothing. Same scope as the claim:
    the tasks right in the message's team (another team's id is NotFound), a celery_queue endpoint's
    message (else Conflict). Returns the message and what it did (messages/ordering.Release)."""
    with transaction.atomic():
        message = message_lock(message_id=message_id, caller=caller, action=Action.TASKS)
        if message.endpoint.handler != Endpoint.Handler.CELERY_QUEUE:
            raise Conflict(f"message {message.id} is not a Celery task (its endpoint {message.endpoint.name!r} is "
                           f"a {message.endpoint.handler} endpoint)")
        holder = holder_of(message)
    if holder is None:
        return message, Release.NONE
    return message, ordering_task_ended(message_id=holder, retrying=retrying, live_only=True).release

"""Scheduling, cancelling, republishing, resending and rescheduling messages. The row is the outbox:
it is saved in one transaction and published after the commit, either written ``published`` with
its route fixed (relay_claim_new) or ``pending`` for the relay to lock, publish and mark. What a
request may ask for, and the unsaved row it makes, is inputs.py's."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduling.audit import actions
from scheduling.audit.services import audit_record
from scheduling.core import debounce as debounce_rules
from scheduling.core import lifecycle
from scheduling.core.caller import PLATFORM, Caller
from scheduling.core.clock import MS, ceil_ms
from scheduling.core.errors import BulkValidationError, Conflict, Forbidden, NotFound
from scheduling.core.lifecycle import Status
from scheduling.core.roles import Action
from scheduling.endpoints.services import endpoint_lock_wires
from scheduling.messages import wire
from scheduling.messages.claims import relay_claim_new, relay_send_claimed
from scheduling.messages.debounce import message_debounce_apply
from scheduling.messages.inputs import endpoint_resolve_names, message_build, message_due_at
from scheduling.messages.notifying import notification_emit_quota_warnings
from scheduling.messages.ordering import ordering_end
from scheduling.messages.relay import relay_publish_rows
from scheduling.messages.selectors import message_describe_gone
from scheduling.messages.structured import task_problem
from scheduling.models import DeliveryMode, Endpoint, ScheduledMessage
from scheduling.models.delivery import Trigger
from scheduling.observability import metrics, tracing
from scheduling.teams.quotas import (
    leaves_copy,
    payload_size,
    team_check_in_flight,
    team_record_copies,
    team_task_refusal,
)


@dataclass(frozen=True)
class Scheduled:
    message: ScheduledMessage
    created: bool  # False: an existing message returned for the same idempotency key


def _check_tasks(rows: list[ScheduledMessage], caller: Caller) -> None:
    """Celery tasks need the right to send them in their team (a key's ``tasks`` scope)."""
    for row in rows:
        if row.endpoint.handler == Endpoint.Handler.CELERY_QUEUE and not caller.may(Action.TASKS, row.endpoint.team_id):
            raise Forbidden(f"sending Celery tasks to {row.endpoint.name!r} needs the {Action.TASKS.scope} scope "
                            f"and the member role in team {row.endpoint.team.name}")


def message_schedule_many(*, items: list[dict], caller: Caller = PLATFORM) -> list[Scheduled]:
    """All-or-nothing: validate every item, then save the new rows in one transaction. An
    idempotency key already used on the endpoint returns that message instead of a new one.
    Endpoints named are looked up in the teams where ``caller`` may schedule; each team's
    messages in flight stay within its quota."""
    now = ceil_ms(timezone.now())
    endpoints = endpoint_resolve_names(items=items, caller=caller)
    rows, errors = [], {}
    for index, item in enumerate(items):
        try:
            rows.append(message_build(item=item, endpoints=endpoints, now=now))
        except ValidationError as exc:
            errors[index] = exc.message_dict
    if errors:
        raise BulkValidationError(errors, total=len(items))
    _check_tasks(rows, caller)
    spans = _schedule_spans(rows) if tracing.ENABLED else None
    outcome = "error"
    try:
        for attempt in range(2):
            try:
                # one message: its span is current, so the request's log lines carry its trace id
                with tracing.use(spans[0]) if spans and len(spans) == 1 else contextlib.nullcontext():
                    results = _save(rows, check_quota=caller is not PLATFORM)
                outcome = "scheduled"
                return results
            except IntegrityError:  # the same idempotency key was used concurrently: look again
                if attempt:
                    raise
        raise AssertionError("unreachable")
    finally:
        if spans:
            tracing.schedule_end(spans, rows, outcome)


def _schedule_spans(rows: list[ScheduledMessage]) -> list:
    """Tracing on: a schedule span per message, in its caller's trace (or a new one); the row keeps
    the span's traceparent, which every later hop continues."""
    spans = []
    for row in rows:
        span = tracing.schedule_start(parent=row.traceparent, team=row.endpoint.team.name,
                                      endpoint=row.endpoint.name)
        row.traceparent = tracing.header_of(span)
        spans.append(span)
    return spans


def _audit_scheduled(results: list[Scheduled]) -> None:
    """One audit row per team and request: a single message names itself, a bulk its count."""
    by_team: dict[int, list[ScheduledMessage]] = {}
    for result in results:
        if result.created:
            by_team.setdefault(result.message.endpoint.team_id, []).append(result.message)
    for made in by_team.values():
        first = made[0]
        if len(made) == 1:
            audit_record(action=actions.MESSAGE_SCHEDULE, obj=first, team=first.endpoint.team,
                         after={"endpoint": first.endpoint.name, "due_at": first.due_at,
                                "idempotency_key": first.idempotency_key})
        else:
            audit_record(action=actions.MESSAGE_SCHEDULE_BULK, team=first.endpoint.team, object_type="scheduledmessage",
                         object_repr=f"{len(made):,} messages", extra={
                             "count": len(made), "endpoints": sorted({m.endpoint.name for m in made}),
                             "first_id": first.id, "last_id": made[-1].id})


def _save(rows: list[ScheduledMessage], *, check_quota: bool) -> list[Scheduled]:
    with transaction.atomic():
        endpoint_lock_wires(endpoints=[row.endpoint for row in rows])  # built for the wire they still have
        keyed = {(r.endpoint_id, r.idempotency_key) for r in rows if r.idempotency_key}
        existing = {}
        if keyed:
            for m in ScheduledMessage.objects.select_related("endpoint__team", "topology").filter(
                endpoint_id__in={e for e, _ in keyed}, idempotency_key__in={k for _, k in keyed}
            ):
                existing[(m.endpoint_id, m.idempotency_key)] = m
        results, new, seen = [], [], {}
        for row in rows:
            key = (row.endpoint_id, row.idempotency_key)
            if row.idempotency_key and key in existing:
                results.append(Scheduled(existing[key], created=False))
            elif row.idempotency_key and key in seen:  # repeated within this request
                results.append(Scheduled(seen[key], created=False))
            else:
                new.append(row)
                if row.idempotency_key:
                    seen[key] = row
                results.append(Scheduled(row, created=True))
        for row in new:  # as built (a second attempt after an IntegrityError finds them claimed or superseded)
            row.status, row.published_at, row.finished_at = Status.PENDING, None, None
        if any(row.debounce_key is not None for row in new):
            message_debounce_apply(rows=new)  # may supersede some: saved so, never published
        live = [row for row in new if row.status == Status.PENDING]
        if check_quota:  # each team's lock in the order of their ids: two bulks never wait on each other
            per_team: dict[int, list[ScheduledMessage]] = {}
            for row in live:
                per_team.setdefault(row.endpoint.team_id, []).append(row)
            for _, team_rows in sorted(per_team.items()):
                team = team_rows[0].endpoint.team
                warnings = team_check_in_flight(team=team, sizes=[r.payload_bytes for r in team_rows])
                if warnings:
                    notification_emit_quota_warnings(team=team, warnings=list(warnings))
        claimed = relay_claim_new(rows=live)  # written as published, sent after the commit
        with transaction.atomic():
            ScheduledMessage.objects.insert_many(new)
        metrics.scheduled(new)
        _audit_scheduled(results)
        if claimed:
            transaction.on_commit(lambda: relay_send_claimed(claimed=claimed))
        outbox = [row for row in new if row.delivery_mode == DeliveryMode.NATIVE and row.status == Status.PENDING]
        if outbox:
            transaction.on_commit(lambda: relay_publish_rows(rows=outbox))
    return results


def message_schedule(
    *,
    endpoint: str | Endpoint,
    payload,
    delay: timedelta | float | int | Decimal | str | None = None,
    deliver_at: datetime | None = None,
    idempotency_key: str | None = None,
    team: str | None = None,
    caller: Caller = PLATFORM,
    traceparent: str | None = None,
    on_delivered: str | Endpoint | None = None,
    on_failed: str | Endpoint | None = None,
    expires_at: datetime | None = None,
    expire_after_seconds: timedelta | float | int | Decimal | str | None = None,
    debounce: dict | None = None,
    flow_key: str | None = None,
    ordering_key: str | None = None,
) -> ScheduledMessage:
    """Schedule one message for ``endpoint`` after ``delay`` (seconds or timedelta) or at
    ``deliver_at``. Raises ValidationError naming the field for bad input; stores nothing then.
    ``traceparent``: a W3C traceparent the message continues (ignored unless valid).
    ``on_delivered``/``on_failed``: endpoints of its team that get its outcome record.
    ``expires_at`` or ``expire_after_seconds`` (after the due time): never handed over from then on.
    ``debounce``: ``{"key", "seconds", "max_seconds", "mode"}`` (core/debounce.py).
    ``ordering_key``: handed over one at a time, in due order, with the endpoint's messages of this key."""
    try:
        (result,) = message_schedule_many(
            items=[
                {
                    "endpoint": endpoint,
                    "team": team,
                    "payload": payload,
                    "delay": delay,
                    "deliver_at": deliver_at,
                    "idempotency_key": idempotency_key,
                    "traceparent": traceparent,
                    "on_delivered": on_delivered,
                    "on_failed": on_failed,
                    "expires_at": expires_at,
                    "expire_after_seconds": expire_after_seconds,
                    "debounce": debounce,
                    "flow_key": flow_key,
                    "ordering_key": ordering_key,
                }
            ],
            caller=caller,
        )
    except BulkValidationError as exc:
        raise ValidationError(exc.errors[0]) from None
    return result.message


def _locked(message_id, caller: Caller, action: Action) -> ScheduledMessage:
    """The message, locked, if ``caller`` may do ``action`` to it: NotFound when it is not one of
    its teams' (or gone), Forbidden when it may only read it."""
    try:
        message = ScheduledMessage.objects.select_for_update(of=("self",)).select_related("endpoint__team").get(
            id=message_id)
    except (ScheduledMessage.DoesNotExist, ValidationError, ValueError):
        raise NotFound(message_describe_gone(message_id=message_id)) from None
    team = message.endpoint.team_id
    if not caller.may(action, team):
        if caller.may(Action.READ, team) or caller.member_of & {team}:
            raise Forbidden(f"you may not {action.name.lower()} messages of team {message.endpoint.team.name}")
        raise NotFound(message_describe_gone(message_id=message_id))
    return message


def message_lock(*, message_id, caller: Caller, action: Action) -> ScheduledMessage:
    """The message, locked until the transaction ends, if ``caller`` may do ``action`` to it
    (NotFound, Forbidden as above): for the services of other slices (celery/services.py)."""
    return _locked(message_id, caller, action)


def message_cancel(*, message_id, caller: Caller = PLATFORM) -> ScheduledMessage:
    """Cancel a pending or published message: the relay will not publish it, and if it is
    already in the cascade the consumer drops it on arrival. Cancelling twice is fine."""
    with transaction.atomic():
        message = _locked(message_id, caller, Action.CANCEL)
        was = message.status
        try:
            change = lifecycle.cancel(message, now=timezone.now())
        except lifecycle.IllegalTransition:
            raise Conflict(f"message {message.id} is already {message.status} and cannot be cancelled") from None
        if change:
            team_record_copies(rows=[message], now=timezone.now())  # its copy in the cascade still counts
            message.save(update_fields=lifecycle.apply(message, change))
            if message.ordering_key is not None:  # the next of its key (once a call of it still out has ended)
                ordering_end(keys=[(message.endpoint_id, message.ordering_key)])
            metrics.cancelled(message)
            audit_record(action=actions.MESSAGE_CANCEL, obj=message, team=message.endpoint.team,
                         before={"status": was}, after={"status": message.status})
    return message


def message_wire_refusal(*, message: ScheduledMessage) -> str | None:
    """Why a finished message cannot go out again on its endpoint's wire as it is now, or None. Its
    handler may have moved to ``celery_queue`` since it was scheduled (with nothing in flight, as
    endpoint_update allows): its payload was never checked as a task its team may send, so it is
    checked now, as a new task would be. A task the platform captured goes as captured."""
    endpoint = message.endpoint
    if endpoint.handler != Endpoint.Handler.CELERY_QUEUE or wire.is_captured(message):
        return None
    return task_problem(message.payload, queue=endpoint.queue, name=endpoint.name) \
        or team_task_refusal(team=endpoint.team, task=message.payload["task"])


def message_republish(*, message_id, caller: Caller = PLATFORM) -> ScheduledMessage:
    """Send a failed message again, due at its original time (so overdue means now)."""
    with transaction.atomic():
        message = _locked(message_id, caller, Action.CANCEL)
        try:
            change = lifecycle.republish(message)
        except lifecycle.IllegalTransition:
            raise Conflict(
                f"message {message.id} is {message.status}; only failed messages can be republished"
            ) from None
        if why := message_wire_refusal(message=message):
            raise Conflict(f"message {message.id} is not a task its endpoint {message.endpoint.name!r} takes: {why}")
        team_check_in_flight(team=message.endpoint.team, sizes=[payload_size(message)])
        # its next attempt is a person's doing (listed so)
        message.save(update_fields=lifecycle.apply(message, {**change, "trigger": Trigger.MANUAL}))
        audit_record(action=actions.MESSAGE_REPUBLISH, obj=message, team=message.endpoint.team,
                     before={"status": Status.FAILED.value}, after={"status": message.status})
        transaction.on_commit(lambda: relay_publish_rows(rows=[message]))
    return message


def message_resend(*, message_id, caller: Caller = PLATFORM) -> ScheduledMessage:
    """Send a delivered (or failed) message again, as a new attempt a person asked for (trigger
    ``manual``): pending at its original due time, so at once, published after the commit as a
    republish is. Its earlier attempts stay listed. Conflict while it is in flight, cancelled, a
    Celery task (its workers run it: send the task again), or while a webhook call of it is in
    flight (the worker making it still has to record it)."""
    with transaction.atomic():
        message = _locked(message_id, caller, Action.CANCEL)
        if message.endpoint.handler == Endpoint.Handler.CELERY_QUEUE:
            raise Conflict(f"message {message.id} is a Celery task: send the task again instead")
        if message.call_lease_until is not None and message.call_lease_until > timezone.now():
            raise Conflict(f"message {message.id} has a webhook call in flight until "
                           f"{message.call_lease_until.isoformat()}; resend it after that")
        was = message.status
        try:
            change = lifecycle.resend(message)
        except lifecycle.IllegalTransition:
            raise Conflict(f"message {message.id} is {message.status}; only delivered or failed messages can be "
                           f"resent") from None
        team_check_in_flight(team=message.endpoint.team, sizes=[payload_size(message)])
        message.save(update_fields=lifecycle.apply(message, {**change, "trigger": Trigger.MANUAL}))
        audit_record(action=actions.MESSAGE_RESEND, obj=message, team=message.endpoint.team,
                     before={"status": was}, after={"status": message.status})
        transaction.on_commit(lambda: relay_publish_rows(rows=[message]))
    return message


def message_reschedule(*, message_id, delay=None, deliver_at: datetime | None = None,
                       caller: Caller = PLATFORM) -> ScheduledMessage:
    """Move a pending or published message to a new due time (a delay from now, or a time). It keeps
    its id; its earlier due times stay in ``due_history``. Its copy for the old time, still in the
    cascade, is dropped when it arrives (lifecycle.superseded), and a copy for the new time is
    published after the commit. Conflict once delivered, cancelled or failed. Its expires_at is
    kept: a new due time at or after it is refused (ValidationError on the due time's field); so is
    one past its trailing debounce window's cap (debounce_until)."""
    now = ceil_ms(timezone.now())
    with transaction.atomic():
        message = _locked(message_id, caller, Action.SCHEDULE)
        if message.endpoint.handler == Endpoint.Handler.CELERY_QUEUE:
            raise Conflict(f"message {message.id} is a Celery task: revoke it with cancel_task and send it again")
        errors: dict[str, str] = {}
        due_at = message_due_at(delay=delay, deliver_at=deliver_at, version=message.topology, now=now, errors=errors)
        field = "delay" if delay is not None else "deliver_at"
        if due_at is not None and not lifecycle.expiry_valid(due_at=due_at, expires_at=message.expires_at):
            errors[field] = (
                f"is at or after the message's expires_at ({message.expires_at.isoformat().replace('+00:00', 'Z')}): "
                "it would expire before it is due")
        elif due_at is not None and message.status in lifecycle.IN_FLIGHT and (
                capped := debounce_rules.reschedule_error(mode=message.debounce_mode, until=message.debounce_until,
                                                          due_at=due_at)):
            errors[field] = capped
        if errors:
            raise ValidationError(errors)
        try:
            change = lifecycle.reschedule(message, due_at=due_at, now=now, history=message.due_history)
        except lifecycle.IllegalTransition:
            raise Conflict(f"message {message.id} is already {message.status} and cannot be rescheduled") from None
        if due_at == message.due_at:
            return message  # already due then: nothing to move
        moved = {**change, "requested_delay_ms": max(0, (due_at - now) // MS)}
        if leaves_copy(message, now):  # its copy for the old time stays in the cascade: one more in flight
            team_check_in_flight(team=message.endpoint.team, sizes=[payload_size(message)])
            team_record_copies(rows=[message], now=now)
        was = message.due_at
        message.save(update_fields=lifecycle.apply(message, moved))
        if message.ordering_key is not None:  # moved later, another message of its key may now be first
            ordering_end(keys=[(message.endpoint_id, message.ordering_key)])
        metrics.rescheduled(message)
        audit_record(action=actions.MESSAGE_RESCHEDULE, obj=message, team=message.endpoint.team,
                     before={"due_at": was}, after={"due_at": message.due_at})
        if message.delivery_mode == DeliveryMode.NATIVE:
            transaction.on_commit(lambda: relay_publish_rows(rows=[message]))
    return message

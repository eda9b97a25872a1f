"""Scheduling, cancelling, republishing and resending messages. The row is the outbox: it is
saved in one transaction and published after the commit, either written ``published`` with its
route fixed (relay_claim_new) or ``pending`` for the relay to lock, publish and mark."""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

import orjson
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from uuid_utils.compat import uuid7

from scheduling.audit import actions
from scheduling.audit.services import audit_record
from scheduling.config.conf import conf, setting_name
from scheduling.core import debounce as debounce_rules
from scheduling.core import lifecycle, ordering
from scheduling.core import traceparent as trace_context
from scheduling.core.caller import PLATFORM, Caller
from scheduling.core.clock import MS, ceil_ms
from scheduling.core.errors import BulkValidationError, Conflict, Forbidden, NotFound
from scheduling.core.lifecycle import Status
from scheduling.core.roles import Action
from scheduling.core.text import NUL_CHARACTERS, has_nul
from scheduling.endpoints.services import endpoint_lock_wires
from scheduling.messages import wire
from scheduling.messages.debounce import message_debounce_apply, message_debounce_check
from scheduling.messages.notifying import notification_emit_quota_warnings
from scheduling.messages.ordering import ordering_end
from scheduling.messages.relay import relay_claim_new, relay_publish_rows, relay_send_claimed
from scheduling.messages.selectors import message_describe_gone
from scheduling.messages.structured import task_problem
from scheduling.models import (
    FLOW_KEY_MAX_LENGTH,
    DeliveryMode,
    Endpoint,
    ScheduledMessage,
    TopologyVersion,
    Trigger,
)
from scheduling.observability import metrics, tracing
from scheduling.teams.quotas import (
    leaves_copy,
    payload_size,
    team_check_in_flight,
    team_record_copies,
    team_task_refusal,
)
from topology import cascade

# Idempotency keys of this prefix are the platform's: a recurring schedule's runs are keyed
# ``schedule:<key>:<revision>:<ms>`` (schedules/services.py), and a caller's message under such a
# key would be taken for the run. Only an item the schedules service marks with its schedule uses it.
PLATFORM_KEY_PREFIX = "schedule:"
# Beyond any cascade's maximum delay (64 levels of 1 s): a delay is clamped to this before any
# arithmetic, so "1e999999" seconds cannot overflow and is refused as over the maximum.
_BEYOND_SECONDS = Decimal(2**70)


@dataclass(frozen=True)
class Scheduled:
    message: ScheduledMessage
    created: bool  # False: an existing message returned for the same idempotency key


def _delay_ms(delay) -> int:
    """Milliseconds, rounded up: a requested delay is never shortened."""
    if isinstance(delay, timedelta):
        return math.ceil(delay / MS)
    if isinstance(delay, bool):
        raise ValidationError({"delay": "must be a number of seconds"})
    try:
        seconds = delay if isinstance(delay, Decimal) else Decimal(str(delay))
    except (InvalidOperation, ValueError):
        raise ValidationError({"delay": "must be a number of seconds"}) from None
    if not seconds.is_finite():
        raise ValidationError({"delay": "must be a finite number of seconds"})
    return math.ceil(max(-_BEYOND_SECONDS, min(seconds, _BEYOND_SECONDS)) * 1000)


def _has_non_finite(value) -> bool:
    if type(value) is float:
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


def _payload_json(payload) -> str:
    """The payload as compact JSON, written to the row as is (one encoding per message). orjson
    where it encodes as json would (not NaN nor infinity, which JSON has not; not an integer past
    64 bits, which it refuses): json's otherwise, and its error."""
    if not _has_non_finite(payload):
        try:
            return orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:
            pass
    try:
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError({"payload": f"must be JSON: {exc}"}) from None


def message_check_payload(*, payload) -> str:
    """The payload's JSON text, or ValidationError on ``payload`` saying why it cannot be sent."""
    if payload is None:
        raise ValidationError({"payload": "required (any JSON value except null)"})
    encoded = _payload_json(payload)
    size = len(encoded.encode())
    if has_nul(payload):
        raise ValidationError({"payload": f"must not contain {NUL_CHARACTERS}"})
    if size > conf().max_payload_bytes:
        raise ValidationError({"payload": f"is {size:,} bytes of JSON; the limit is {conf().max_payload_bytes:,}"})
    return encoded


def _due_at(delay, deliver_at, version: TopologyVersion | None, now: datetime, errors: dict) -> datetime | None:
    """The due time of a delay or a deliver-at time (exactly one), within the version's longest
    delay; None with the problem in ``errors`` (under "delay" or "deliver_at")."""
    due_at = None
    if (delay is None) == (deliver_at is None):
        errors["delay"] = "give exactly one of a delay or a deliver-at time"
    elif delay is not None:
        try:
            delay_ms = _delay_ms(delay)
        except ValidationError as exc:
            errors.update({k: v[0] for k, v in exc.message_dict.items()})
        else:
            limit_ms = version.max_delay_ms if version else cascade.V3.max_delay_ms
            if delay_ms < 0:
                errors["delay"] = "must not be negative"
            elif delay_ms > limit_ms:  # checked before any date arithmetic (it would overflow)
                name = version.name if version else "the default version"
                errors["delay"] = f"is over the maximum delay of {limit_ms // 1000:,} s for topology {name}"
            else:
                due_at = _plus(now, delay_ms, errors, "delay")
    else:
        if not isinstance(deliver_at, datetime) or timezone.is_naive(deliver_at):
            errors["deliver_at"] = "must be a date-time with a timezone, e.g. 2026-11-21T12:00:00.250Z"
        elif abs((deliver_at - now) // MS) > _limit_ms(version):  # checked before rounding (it would overflow)
            name = version.name if version else "the default version"
            errors["deliver_at"] = (f"is {'over' if deliver_at > now else 'further in the past than'} the maximum "
                                    f"delay of {_limit_ms(version) // 1000:,} s for topology {name}")
        else:
            due_at = ceil_ms(deliver_at)
    if due_at is not None and version is not None:
        limit_ms = version.max_delay_ms
        if (due_at - now) // MS > limit_ms:
            field = "delay" if delay is not None else "deliver_at"
            errors[field] = (f"is over the maximum delay of {limit_ms // 1000:,} s for topology "
                             f"{version.name}")
    return due_at


def _expires_at(item: dict, due_at: datetime | None, version: TopologyVersion | None, errors: dict) -> datetime | None:
    """The item's expiry: ``expires_at`` as given, or ``expire_after_seconds`` after the due time
    (one or the other, never both), after the due time and at most the version's longest delay
    after it; None (never expires) when neither is given, or with the problem in ``errors``."""
    expires_at, after = item.get("expires_at"), item.get("expire_after_seconds")
    if expires_at is None and after is None:
        return None
    if expires_at is not None and after is not None:
        both = "give one of expires_at or expire_after_seconds, not both"
        errors["expires_at"] = errors["expire_after_seconds"] = both
        return None
    limit_ms, field = _limit_ms(version), "expires_at" if expires_at is not None else "expire_after_seconds"
    if after is not None:
        try:
            after_ms = _delay_ms(after)
        except ValidationError as exc:
            errors[field] = exc.message_dict["delay"][0]
            return None
        if after_ms <= 0:
            errors[field] = "must be more than 0 seconds"
            return None
        if after_ms > limit_ms:
            errors[field] = f"is over the maximum of {limit_ms // 1000:,} s (the longest delay)"
            return None
    elif not isinstance(expires_at, datetime) or timezone.is_naive(expires_at):
        errors[field] = "must be a date-time with a timezone, e.g. 2026-11-21T13:00:00Z"
        return None
    if due_at is None:  # the due time's own error is reported
        return None
    if after is not None:
        return _plus(due_at, after_ms, errors, field)
    if not lifecycle.expiry_valid(due_at=due_at, expires_at=expires_at):
        errors[field] = f"must be after the due time ({due_at.isoformat().replace('+00:00', 'Z')}): " \
                        "a message cannot be delivered after it expires"
        return None
    if (expires_at - due_at) // MS > limit_ms:
        errors[field] = f"is more than the maximum of {limit_ms // 1000:,} s (the longest delay) after the due time"
        return None
    return ceil_ms(expires_at)


def _endpoint_of(item: dict, endpoints: dict[str, list[Endpoint]], errors: dict) -> Endpoint | None:
    """The item's endpoint: given as a row (the platform's own callers), or by name among the
    caller's teams (and the team it names, if it names one)."""
    given = item.get("endpoint")
    if isinstance(given, Endpoint):
        return given
    name, team = _endpoint_name(given), item.get("team")
    found = [e for e in endpoints.get(name, ()) if not team or e.team.name == team]
    if len(found) == 1:
        return found[0]
    if not found:
        errors["endpoint"] = f"unknown endpoint {name!r}" + (f" in team {team!r}" if team else "")
    else:
        teams = ", ".join(sorted(e.team.name for e in found))
        errors["endpoint"] = f"several of your teams have an endpoint {name!r} ({teams}): give team"
    return None


CALLBACKS = ("on_delivered", "on_failed")


def _callback_of(item: dict, field: str, endpoint: Endpoint | None, endpoints: dict[str, list[Endpoint]],
                 errors: dict) -> Endpoint | None:
    """An item's ``on_delivered``/``on_failed``: an endpoint (a row, or its name) of the message's own
    team that takes a notification's JSON (not a Celery queue's tasks); None when not given."""
    given = item.get(field)
    if given is None or endpoint is None:
        return None
    if isinstance(given, Endpoint):
        found = [given] if given.team_id == endpoint.team_id else []
    else:
        name = _endpoint_name(given)
        found = [e for e in endpoints.get(name, ()) if e.team_id == endpoint.team_id]
    if not found:
        errors[field] = f"unknown endpoint {_endpoint_name(given)!r} in team {endpoint.team.name!r}"
        return None
    if found[0].handler == Endpoint.Handler.CELERY_QUEUE:
        errors[field] = (f"endpoint {found[0].name!r} is a Celery queue: a callback goes to a webhook or "
                         "record-only endpoint")
        return None
    return found[0]


def _build(item: dict, endpoints: dict[str, list[Endpoint]], now: datetime) -> ScheduledMessage:
    """Validate one request and return an unsaved row; every problem is a field error."""
    errors: dict[str, str] = {}
    endpoint = _endpoint_of(item, endpoints, errors)
    if endpoint is not None and not endpoint.is_active:
        errors["endpoint"] = f"endpoint {endpoint.name!r} is inactive"
    callbacks = {field: _callback_of(item, field, endpoint, endpoints, errors) for field in CALLBACKS}
    delay, deliver_at = item.get("delay"), item.get("deliver_at")
    due_at = _due_at(delay, deliver_at, endpoint.topology if endpoint else None, now, errors)
    expires_at = _expires_at(item, due_at, endpoint.topology if endpoint else None, errors)
    payload = item.get("payload")
    try:
        encoded = message_check_payload(payload=payload)
    except ValidationError as exc:
        errors["payload"] = exc.message_dict["payload"][0]
    else:
        if endpoint is not None and endpoint.handler == Endpoint.Handler.CELERY_QUEUE \
                and not item.get("captured_task"):
            why = task_problem(payload, queue=endpoint.queue, name=endpoint.name) \
                or team_task_refusal(team=endpoint.team, task=payload["task"])
            if why:
                errors["payload"] = why
    key = item.get("idempotency_key")
    if key is not None and (not isinstance(key, str) or not 1 <= len(key) <= 255 or has_nul(key)):
        errors["idempotency_key"] = f"must be a string of 1 to 255 characters, without {NUL_CHARACTERS}"
    elif isinstance(key, str) and key.startswith(PLATFORM_KEY_PREFIX) and not item.get("schedule"):
        errors["idempotency_key"] = (f"keys starting {PLATFORM_KEY_PREFIX!r} are the platform's (its recurring "
                                     "schedules' runs): choose another")
    debounced = message_debounce_check(value=item.get("debounce"), max_delay_ms=_limit_ms(
        endpoint.topology if endpoint else None), errors=errors) if item.get("debounce") is not None else {}
    flow_key = item.get("flow_key")
    if flow_key is not None and (not isinstance(flow_key, str) or not 1 <= len(flow_key) <= FLOW_KEY_MAX_LENGTH
                                 or has_nul(flow_key)):
        errors["flow_key"] = f"must be a string of 1 to {FLOW_KEY_MAX_LENGTH} characters, without {NUL_CHARACTERS}"
    ordering_key = item.get("ordering_key")
    if ordering_key is not None:  # the platform's own (a schedule's run with an overlap policy) may start schedule:
        _check_ordering_key(ordering_key, errors, platform=bool(item.get("schedule")))
    if errors:
        raise ValidationError(errors)
    row = ScheduledMessage.new(
        id=item.get("id") or uuid7(),  # a Celery task keeps its task id
        status=lifecycle.transition(lifecycle.NEW, lifecycle.Event.SCHEDULE),
        endpoint=endpoint,
        delivery_mode=endpoint.delivery_mode,
        payload=payload,
        due_at=due_at,
        requested_delay_ms=max(0, (due_at - now) // MS),
        idempotency_key=key,
        schedule=item.get("schedule"),  # a schedule's run (schedules/services.py)
        captured_task=bool(item.get("captured_task")),  # only the platform's own callers pass it (wire.is_captured)
        created_at=now,
        # a caller's W3C traceparent, kept if valid and ignored if not (W3C Trace Context's rule)
        traceparent=trace_context.parse(item.get("traceparent")),
        event_id=item.get("event_id"),  # an event's fan-out (events/services.py), its id
        on_delivered_id=callbacks["on_delivered"].pk if callbacks["on_delivered"] else None,
        on_failed_id=callbacks["on_failed"].pk if callbacks["on_failed"] else None,
        expires_at=expires_at,
        **debounced,  # its key, mode and durations (messages/debounce.py sets its window when saved)
        flow_key=flow_key,  # its endpoint's per-key limits (docs/guides/flow-control.md "By key")
        ordering_key=ordering_key,
        overlap=item.get("overlap") if ordering_key is not None else None,  # a schedule's run (schedules/services.py)
    )
    row.payload_json = encoded  # what insert_many writes
    row.payload_bytes = len(encoded.encode())  # what the team's bytes quota sums
    return row


def _check_ordering_key(key, errors: dict, *, platform: bool = False) -> None:
    """A key of 1 to 200 characters without NUL, not starting ``schedule:`` unless the platform's own
    (``platform``: a schedule's run). Every handler takes one: the delivery path takes the key's turn
    (messages/ordering.py), a celery_queue endpoint's claim does (celery/turns.py). While
    DELAY_ORDERING_KEYS is off, none from a caller (a rolling upgrade: old workers would ignore it)."""
    if not platform and not conf().ordering_keys:
        errors["ordering_key"] = ordering.keys_off_problem(setting=setting_name("ordering_keys"))
    elif why := ordering.key_problem(key, platform=platform):
        errors["ordering_key"] = why


def _limit_ms(version: TopologyVersion | None) -> int:
    return version.max_delay_ms if version else cascade.V3.max_delay_ms


def _plus(now: datetime, delay_ms: int, errors: dict, field: str) -> datetime | None:
    """now + delay_ms, or None with an error when that is past the year 9999 (a cascade of many levels)."""
    try:
        return now + delay_ms * MS
    except OverflowError:
        errors[field] = "is past the largest date (9999-12-31)"
        return None


def _endpoint_name(value) -> str | None:
    return value.name if isinstance(value, Endpoint) else value if isinstance(value, str) else None


def _endpoints_named(items: list[dict], caller: Caller) -> dict[str, list[Endpoint]]:
    """Name -> the endpoints of that name in the teams where ``caller`` may schedule (one query)."""
    names = {n for n in (_endpoint_name(item.get(field)) for item in items for field in ("endpoint", *CALLBACKS)
                         if not isinstance(item.get(field), Endpoint)) if n and not has_nul(n)}
    if not names:
        return {}
    rows = Endpoint.objects.select_related("topology", "team").filter(name__in=names)
    teams = caller.team_ids(Action.SCHEDULE)
    if teams is not None:
        rows = rows.filter(team_id__in=teams)
    found: dict[str, list[Endpoint]] = {}
    for endpoint in rows:
        found.setdefault(endpoint.name, []).append(endpoint)
    return found


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
    endpoints = _endpoints_named(items, caller)
    rows, errors = [], {}
    for index, item in enumerate(items):
        try:
            rows.append(_build(item, endpoints, now))
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
        due_at = _due_at(delay, deliver_at, message.topology, now, errors)
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

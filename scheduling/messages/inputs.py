"""A schedule request's input, checked and turned into an unsaved row: the endpoint and callbacks
named (in the caller's teams), the delay or deliver-at time, the expiry, the payload's JSON, the
keys and debounce, every problem a field error (message_build). Apart from the scheduling service
(services.py: save, quotas, publish): these are the rules of what a caller may send, read and
changed apart from how rows are saved; the events' publish and a reschedule apply some of them too
(message_check_payload, message_due_at)."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

import orjson
from django.core.exceptions import ValidationError
from django.utils import timezone
from uuid_utils.compat import uuid7

from scheduling.config.conf import conf, setting_name
from scheduling.core import lifecycle, ordering
from scheduling.core import traceparent as trace_context
from scheduling.core.caller import Caller
from scheduling.core.clock import MS, ceil_ms
from scheduling.core.roles import Action
from scheduling.core.text import NUL_CHARACTERS, has_nul
from scheduling.messages.debounce import message_debounce_check
from scheduling.messages.structured import task_problem
from scheduling.models import FLOW_KEY_MAX_LENGTH, Endpoint, ScheduledMessage, TopologyVersion
from scheduling.teams.quotas import team_task_refusal
from topology import cascade

# Idempotency keys of this prefix are the platform's: a recurring schedule's runs are keyed
# ``schedule:<key>:<revision>:<ms>`` (schedules/services.py), and a caller's message under such a
# key would be taken for the run. Only an item the schedules service marks with its schedule uses it.
PLATFORM_KEY_PREFIX = "schedule:"
# Beyond any cascade's maximum delay (64 levels of 1 s): a delay is clamped to this before any
# arithmetic, so "1e999999" seconds cannot overflow and is refused as over the maximum.
_BEYOND_SECONDS = Decimal(2**70)


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


def message_due_at(*, delay, deliver_at, version: TopologyVersion | None, now: datetime,
                   errors: dict) -> datetime | None:
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


def message_build(*, item: dict, endpoints: dict[str, list[Endpoint]], now: datetime) -> ScheduledMessage:
    """Validate one request and return an unsaved row; every problem is a field error."""
    errors: dict[str, str] = {}
    endpoint = _endpoint_of(item, endpoints, errors)
    if endpoint is not None and not endpoint.is_active:
        errors["endpoint"] = f"endpoint {endpoint.name!r} is inactive"
    callbacks = {field: _callback_of(item, field, endpoint, endpoints, errors) for field in CALLBACKS}
    delay, deliver_at = item.get("delay"), item.get("deliver_at")
    due_at = message_due_at(delay=delay, deliver_at=deliver_at, version=endpoint.topology if endpoint else None,
                            now=now, errors=errors)
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


def endpoint_resolve_names(*, items: list[dict], caller: Caller) -> dict[str, list[Endpoint]]:
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

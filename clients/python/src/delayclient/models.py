"""Typed results: one frozen dataclass per thing the API answers. Fields the platform adds later
are kept in ``raw`` (an older client reads a newer platform), times are aware datetimes."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from functools import cache
from typing import Any


def parse_time(value) -> datetime | None:
    """An API time (ISO 8601, ``Z`` or an offset) as an aware datetime."""
    if value is None or isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


@cache
def _time_fields(cls: type) -> frozenset[str]:
    hints = typing.get_type_hints(cls)

    def is_time(hint) -> bool:
        return hint is datetime or (isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union) \
            and datetime in typing.get_args(hint)

    return frozenset(name for name, hint in hints.items() if is_time(hint))


@dataclass(frozen=True)
class Model:
    """``from_api`` builds one from the API's JSON: known fields typed, all of it in ``raw``.
    Every field defaults to None: lean answers (the bulk one) leave some out."""

    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_api(cls, data: dict):
        times = _time_fields(typing.cast(type, cls))
        known = {f.name for f in fields(cls)} - {"raw"}
        values = {name: parse_time(data.get(name)) if name in times else data.get(name) for name in known}
        return cls(raw=data, **values)


@dataclass(frozen=True)
class Message(Model):
    id: str = ""
    team: str | None = None
    endpoint: str | None = None
    topology: str | None = None
    status: str | None = None
    due_at: datetime | None = None
    requested_delay_ms: int | None = None
    routing_key: str | None = None
    first_exchange: str | None = None
    created_at: datetime | None = None
    published_at: datetime | None = None
    delivered_at: datetime | None = None
    cancelled_at: datetime | None = None
    lateness_ms: int | None = None
    scheduled_in_past: bool | None = None
    delivery_count: int | None = None
    idempotency_key: str | None = None
    schedule: str | None = None
    due_history: list | None = None
    trigger: str | None = None
    last_error: str | None = None
    payload: Any = None
    on_delivered: str | None = None  # the endpoint that gets its outcome record once delivered
    on_failed: str | None = None  # ... once its handler gave up
    notification: str | None = None  # the type a platform-made notification or callback carries
    created: bool | None = None  # scheduling answered 201 (True) or found the idempotency key's message (False)
    event: str | None = None  # the event whose fan-out made it (its id), or None
    expires_at: datetime | None = None  # never handed over from then on (ends "expired"); None: never expires
    debounce: dict | None = None  # {"key", "seconds", "max_seconds", "mode", "until"}, or None
    schedule_run_at: datetime | None = None  # a schedule's run: its time by the rule (due_at: moved by its jitter)
    flow_key: str | None = None  # its endpoint's per-key limits count it under this key
    ordering_key: str | None = None  # handed over one at a time, in due order, with its endpoint's others of this key
    waiting_since: datetime | None = None  # when it first waited for its ordering key's turn (status "waiting")
    waiting_for: str | None = None  # status "waiting": the id of the message of its ordering key it waits for


@dataclass(frozen=True)
class MessageStatus(Model):
    """What cancel, republish and resend answer."""

    id: str = ""
    status: str = ""


@dataclass(frozen=True)
class Attempt(Model):
    number: int = 0
    trigger: str | None = None
    started_at: datetime | None = None
    duration_ms: int | None = None
    outcome: str | None = None
    status_code: int | None = None
    excerpt: str | None = None
    worker: str | None = None


@dataclass(frozen=True)
class Claim(Model):
    """A task's arrival recorded: ``run`` says whether the worker runs it (``status`` ``waiting``:
    not its ordering key's turn, it comes again when it is); ``ordered``: the run holds an ordering
    key's turn, so its end is reported (``messages.ended``)."""

    id: str = ""
    status: str = ""
    run: bool = False
    ordered: bool = False


@dataclass(frozen=True)
class TaskEnd(Model):
    """A task's end reported: ``turn`` is ``ended`` (its ordering key let go, the next message of the
    key woken), ``kept`` (retrying: held for the retry) or ``none`` (it held no turn: nothing changed)."""

    id: str = ""
    turn: str = ""


@dataclass(frozen=True)
class BulkJob(Model):
    """A bulk cancel or republish by filter, run by the platform's worker in batches: ``count``
    messages matched when it started, ``done`` grows as batches commit, ``state`` is running,
    done or failed (``error`` says why). ``client.bulk_actions.get(job.id)`` reads it again."""

    id: int = 0
    kind: str = ""
    team: str | None = None
    filters: dict | None = None
    state: str = ""
    count: int = 0
    matched: int = 0
    done: int = 0
    error: str | None = None
    requested_by: str | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    status_url: str | None = None

    @property
    def finished(self) -> bool:
        return self.state != "running"


@dataclass(frozen=True)
class Endpoint(Model):
    team: str | None = None
    name: str = ""
    queue: str | None = None
    topology: str | None = None
    delivery_mode: str | None = None
    handler: str | None = None
    handler_target: str | None = None
    max_deliveries_per_second: int | None = None
    max_concurrent: int | None = None
    max_deliveries_per_second_per_key: int | None = None  # per flow_key of its messages
    max_concurrent_per_key: int | None = None
    webhook_timeout_seconds: float | None = None
    is_active: bool | None = None
    disabled_at: datetime | None = None
    disabled_reason: str | None = None
    health: dict | None = None
    created_at: datetime | None = None
    message_counts: dict | None = None
    message_counts_estimated: list | None = None
    webhook_secret: str | None = None  # only in the answer to creating a webhook endpoint


@dataclass(frozen=True)
class SecretRotated(Model):
    name: str = ""
    webhook_secret: str = ""
    previous_valid_until: datetime | None = None


@dataclass(frozen=True)
class Schedule(Model):
    team: str | None = None
    key: str = ""
    endpoint: str | None = None
    payload: Any = None
    cron: str | None = None
    timezone: str | None = None
    interval_seconds: float | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    missed_runs: str | None = None
    jitter_seconds: float | None = None  # each run due a fixed offset in [0, this) after its time
    catchup_seconds: float | None = None  # missed runs due within this before now are made after a downtime
    overlap: str | None = None  # a run due while the previous has not ended: allow, skip or buffer_one
    is_paused: bool | None = None
    next_run_at: datetime | None = None
    next_run_due_at: datetime | None = None  # next_run_at moved by its jitter
    revision: int | None = None
    runs_skipped: int | None = None  # not made: the team's in-flight quota was full
    last_run_skipped_at: datetime | None = None
    runs_missed: int | None = None  # missed in a downtime and not made (older than the catch-up window)
    last_run_missed_at: datetime | None = None
    runs_overlap_skipped: int | None = None  # not sent: the previous run had not ended (overlap)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    created: bool | None = None  # the upsert created it (True) or updated it (False)


@dataclass(frozen=True)
class NotificationRoute(Model):
    """Where the platform tells a team what happened: one of its endpoints and the types it takes."""

    id: str = ""
    team: str | None = None
    endpoint: str | None = None
    events: list | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class Team(Model):
    name: str = ""
    created_at: datetime | None = None
    role: str | None = None
    quotas: dict | None = None
    api_rate: str | None = None
    key_api_rate: str | None = None
    celery_task_allowlist: str | None = None
    webhook_allowed_networks: str | None = None


@dataclass(frozen=True)
class Member(Model):
    username: str = ""
    role: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True)
class Invitation(Model):
    """An invitation to join ``team`` with ``role``: pending until the person it names accepts or
    declines it, a team admin revokes it, or it expires (``state`` then says ``expired``)."""

    id: int = 0
    team: str | None = None
    username: str = ""
    role: str = ""
    state: str = ""
    invited_by: str | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = None
    answered_at: datetime | None = None


@dataclass(frozen=True)
class ApiKey(Model):
    prefix: str = ""
    name: str | None = None
    team: str | None = None
    user: str | None = None
    scopes: list | None = None
    state: str | None = None
    created_at: datetime | None = None
    created_by: str | None = None
    expires_at: datetime | None = None
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    key: str | None = None  # only in the answer to creating it


@dataclass(frozen=True)
class AuditEvent(Model):
    id: int = 0
    at: datetime | None = None
    source: str | None = None
    actor: str | None = None
    key_prefix: str | None = None
    team: str | None = None
    action: str | None = None
    object_type: str | None = None
    object_id: str | None = None
    object_repr: str | None = None
    before: Any = None
    after: Any = None
    extra: Any = None
    ip: str | None = None
    user_agent: str | None = None
    request_id: str | None = None


@dataclass(frozen=True)
class Subscription(Model):
    """A team's endpoint subscribed to a topic pattern (``*`` one word, ``#`` any), with a filter."""

    id: str = ""
    team: str | None = None
    topic: str | None = None
    endpoint: str | None = None
    filter: dict | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class Event(Model):
    """One publish to a topic; ``messages``: ``[{"id", "endpoint"}, ...]``, one per subscribed endpoint."""

    id: str = ""
    team: str | None = None
    topic: str | None = None
    due_at: datetime | None = None
    idempotency_key: str | None = None
    created_at: datetime | None = None
    messages: list | None = None
    created: bool | None = None  # publishing answered 201 (True) or found the idempotency key's event (False)

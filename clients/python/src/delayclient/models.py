"""Typed results: one frozen dataclass per thing the API answers. Fields the platform adds later
are kept in ``raw`` (an older client reads a newer platform), times are aware datetimes."""

from __future__ import annotations

import dataclasses
import types
import typing
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any


def parse_time(value) -> datetime | None:
    """An API time (ISO 8601, ``Z`` or an offset) as an aware datetime."""
    if value is None or isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


@lru_cache(maxsize=None)
def _time_fields(cls) -> frozenset[str]:
    hints = typing.get_type_hints(cls)

    def is_time(hint) -> bool:
        return hint is datetime or (isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union) \
            and datetime in typing.get_args(hint)

    return frozenset(name for name, hint in hints.items() if is_time(hint))


class Model:
    """``from_api`` builds one from the API's JSON: known fields typed, all of it in ``raw``."""

    @classmethod
    def from_api(cls, data: dict):
        times = _time_fields(cls)
        known = {f.name for f in dataclasses.fields(cls)} - {"raw"}
        values = {name: parse_time(data.get(name)) if name in times else data.get(name) for name in known}
        return cls(**values, raw=data)


def _model(cls):
    """A frozen dataclass whose every field defaults to None (answers that are lean, as the bulk
    one is, leave some out) and whose ``raw`` stays out of its repr."""
    for name in cls.__annotations__:
        if not hasattr(cls, name):
            setattr(cls, name, None)
    cls.__annotations__["raw"] = "dict"
    cls.raw = dataclasses.field(default_factory=dict, repr=False, compare=False)
    return dataclasses.dataclass(frozen=True)(cls)


@_model
class Message(Model):
    id: str
    team: str | None
    endpoint: str | None
    topology: str | None
    status: str | None
    due_at: datetime | None
    requested_delay_ms: int | None
    routing_key: str | None
    first_exchange: str | None
    created_at: datetime | None
    published_at: datetime | None
    delivered_at: datetime | None
    cancelled_at: datetime | None
    lateness_ms: int | None
    scheduled_in_past: bool | None
    delivery_count: int | None
    idempotency_key: str | None
    schedule: str | None
    due_history: list | None
    trigger: str | None
    last_error: str | None
    payload: Any
    created: bool | None  # scheduling answered 201 (True) or found the idempotency key's message (False)


@_model
class MessageStatus(Model):
    """What cancel, republish and resend answer."""

    id: str
    status: str


@_model
class Attempt(Model):
    number: int
    trigger: str | None
    started_at: datetime | None
    duration_ms: int | None
    outcome: str | None
    status_code: int | None
    excerpt: str | None
    worker: str | None


@_model
class Claim(Model):
    """A task's arrival recorded: ``run`` says whether the worker runs it."""

    id: str
    status: str
    run: bool


@_model
class Endpoint(Model):
    team: str | None
    name: str
    queue: str | None
    topology: str | None
    delivery_mode: str | None
    handler: str | None
    handler_target: str | None
    max_deliveries_per_second: int | None
    max_concurrent: int | None
    webhook_timeout_seconds: float | None
    is_active: bool | None
    disabled_at: datetime | None
    disabled_reason: str | None
    health: dict | None
    created_at: datetime | None
    message_counts: dict | None
    message_counts_estimated: list | None
    webhook_secret: str | None  # only in the answer to creating a webhook endpoint


@_model
class SecretRotated(Model):
    name: str
    webhook_secret: str
    previous_valid_until: datetime | None


@_model
class Schedule(Model):
    team: str | None
    key: str
    endpoint: str | None
    payload: Any
    cron: str | None
    timezone: str | None
    interval_seconds: float | None
    start_at: datetime | None
    end_at: datetime | None
    missed_runs: str | None
    is_paused: bool | None
    next_run_at: datetime | None
    revision: int | None
    created_at: datetime | None
    updated_at: datetime | None
    created: bool | None  # the upsert created it (True) or updated it (False)


@_model
class Team(Model):
    name: str
    created_at: datetime | None
    role: str | None
    quotas: dict | None
    api_rate: str | None
    key_api_rate: str | None
    celery_task_allowlist: str | None
    webhook_allowed_networks: str | None


@_model
class Member(Model):
    username: str
    role: str
    created_at: datetime | None


@_model
class ApiKey(Model):
    prefix: str
    name: str | None
    team: str | None
    user: str | None
    scopes: list | None
    state: str | None
    created_at: datetime | None
    created_by: str | None
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None
    key: str | None  # only in the answer to creating it


@_model
class AuditEvent(Model):
    id: int
    at: datetime | None
    source: str | None
    actor: str | None
    key_prefix: str | None
    team: str | None
    action: str | None
    object_type: str | None
    object_id: str | None
    object_repr: str | None
    before: Any
    after: Any
    extra: Any
    ip: str | None
    user_agent: str | None
    request_id: str | None

"""The API's routes as methods, grouped as the API groups them (messages, schedules, endpoints,
teams, keys, audit, subscriptions, events). Each method builds one Call; the client it hangs on sends it, so the same
methods serve ``Client`` (results) and ``AsyncClient`` (awaitables). ``@route`` names the route a
method calls: the test that walks the OpenAPI schema checks every route has one."""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import quote

from . import models
from ._tracing import trace_headers
from ._transport import Call


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # "leave as it is", where None means "no limit"


def route(method: str, path: str):
    def mark(function):
        function.routes = (*getattr(function, "routes", ()), (method, path))
        return function

    return mark


def _seg(value) -> str:
    return quote(str(value), safe="")


def _seconds(value, name: str):
    """A delay as the API takes it: a number of seconds (ms precision), exactly."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be seconds (int, float, Decimal) or a timedelta, not {type(value).__name__}")
    return value


def _time(value, name: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime or an ISO 8601 string")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware (a naive datetime is ambiguous)")
    return value.isoformat()


def _when(delay, deliver_at) -> dict:
    """Exactly one of a delay and a time, as the API's fields."""
    if (delay is None) == (deliver_at is None):
        raise ValueError("give exactly one of delay and deliver_at")
    return {"delay_seconds": _seconds(delay, "delay")} if delay is not None else \
        {"deliver_at": _time(deliver_at, "deliver_at")}


def _expiry(expires_at, expire_after) -> dict:
    """At most one of an expiry time and a number of seconds after the due time, as the API's fields."""
    if expires_at is not None and expire_after is not None:
        raise ValueError("give at most one of expires_at and expire_after")
    if expire_after is not None:
        return {"expire_after_seconds": _seconds(expire_after, "expire_after")}
    return {"expires_at": _time(expires_at, "expires_at")} if expires_at is not None else {}


def _fields(**values) -> dict:
    return {k: v for k, v in values.items() if v is not None and v is not UNSET}


def _one(model):
    return lambda data, status: model.from_api(data)


def _created(model):
    """201 made it, 200 found it (an idempotency key seen, an upsert of an existing key)."""
    return lambda data, status: replace(model.from_api(data), created=status == 201)


def _count(data, status) -> int:
    return int(data["count"])


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


class Resource:
    def __init__(self, client):
        self._client = client

    def _send(self, call: Call):
        return self._client._send(call)

    def _list(self, call: Call, model):
        return self._client._pages(call, model)


class Messages(Resource):
    @route("POST", "/api/messages/")
    def schedule(self, endpoint: str, payload: Any, *, delay=None, deliver_at=None, idempotency_key: str | None = None,
                 team: str | None = None, traceparent: str | None = None, on_delivered: str | None = None,
                 on_failed: str | None = None, expires_at=None, expire_after=None, debounce: dict | None = None,
                 flow_key: str | None = None, ordering_key: str | None = None):
        """Schedule one message ``delay`` seconds from now (int, float, Decimal, timedelta) or at
        ``deliver_at`` (an aware datetime). ``expires_at`` (an aware datetime) or ``expire_after``
        (seconds after its due time): never handed over from then on, it ends ``expired``. The
        idempotency key is made here when not given and
        kept across retries, so a retried call never schedules twice. ``created`` on the result
        says whether this call made it. ``traceparent``: the W3C trace the message continues up to
        its webhook or task; by default the current OpenTelemetry span's, when opentelemetry is
        installed and a span is current. ``on_delivered``/``on_failed``: endpoints of the same team
        that get the message's outcome record once it ends (callbacks). ``debounce``: ``{"key": ...,
        "seconds": ..., "max_seconds": ..., "mode": "trailing" | "leading"}``: a newer message with
        the key on the endpoint replaces this one while it waits (trailing), or this one is
        superseded within the first's window (leading). ``flow_key``: the endpoint's per-key limits
        (max_deliveries_per_second_per_key, max_concurrent_per_key) count it under it. ``ordering_key``:
        messages of the endpoint with this key are handed over one at a time, in due order, each once
        the one before it ended."""
        body = _fields(endpoint=endpoint, payload=payload, team=team, on_delivered=on_delivered, on_failed=on_failed,
                       debounce=debounce, flow_key=flow_key, ordering_key=ordering_key,
                       idempotency_key=idempotency_key or new_idempotency_key(),
                       **_when(delay, deliver_at), **_expiry(expires_at, expire_after))
        return self._send(Call("POST", "/api/messages/", json=body, idempotent=True,
                               parse=_created(models.Message), headers=trace_headers(traceparent)))

    @route("POST", "/api/messages/bulk/")
    def schedule_many(self, messages: Iterable[dict], *, traceparent: str | None = None):
        """Schedule up to the platform's bulk maximum (1,000 by default) at once, all or nothing.
        Each item takes ``schedule``'s arguments as keys (``endpoint``, ``payload``, ``delay`` or
        ``deliver_at``, ``idempotency_key``, ``team``, ``on_delivered``, ``on_failed``, ``debounce``,
        ``flow_key``, ``ordering_key``, ``expires_at`` or ``expire_after``); keys are
        made for items without one.
        ``traceparent`` (or the current span's) is every message's, as in ``schedule``."""
        items = []
        for item in messages:
            item = dict(item)
            when = _when(item.pop("delay", None), item.pop("deliver_at", None))
            when |= _expiry(item.pop("expires_at", None), item.pop("expire_after", None))
            unknown = set(item) - {"endpoint", "payload", "idempotency_key", "team", "on_delivered", "on_failed",
                                   "debounce", "flow_key", "ordering_key"}
            if unknown:
                raise TypeError(f"unknown message field(s): {', '.join(sorted(unknown))}")
            items.append(_fields(**item, **when) | {"payload": item.get("payload"),
                                                   "idempotency_key": item.get("idempotency_key")
                                                   or new_idempotency_key()})
        return self._send(Call("POST", "/api/messages/bulk/", json={"messages": items}, idempotent=True,
                               parse=lambda data, status: [models.Message.from_api(m) for m in data["messages"]],
                               headers=trace_headers(traceparent)))

    @route("GET", "/api/messages/{id}/")
    def get(self, message_id: str):
        return self._send(Call("GET", f"/api/messages/{_seg(message_id)}/", idempotent=True,
                               parse=_one(models.Message)))

    @route("GET", "/api/messages/")
    def list(self, *, endpoint: str | None = None, status: str | None = None, schedule: str | None = None,
             team: str | None = None):
        """Newest first, every page in turn as you iterate (``.first(n)`` for a few)."""
        params = {"endpoint": endpoint, "status": status, "schedule": schedule, "team": team}
        return self._list(Call("GET", "/api/messages/", params=params, idempotent=True), models.Message)

    @route("POST", "/api/messages/{id}/cancel/")
    def cancel(self, message_id: str):
        """409 (Conflict) once it was delivered; cancelling twice is fine."""
        return self._send(Call("POST", f"/api/messages/{_seg(message_id)}/cancel/", idempotent=True,
                               parse=_one(models.MessageStatus)))

    @route("PATCH", "/api/messages/{id}/")
    def reschedule(self, message_id: str, *, delay=None, deliver_at=None):
        """A new due time, same id. Retried on failure only when given as ``deliver_at`` (a delay
        sent twice would count from two different nows)."""
        return self._send(Call("PATCH", f"/api/messages/{_seg(message_id)}/", json=_when(delay, deliver_at),
                               idempotent=deliver_at is not None, parse=_one(models.Message)))

    @route("POST", "/api/messages/{id}/republish/")
    def republish(self, message_id: str):
        return self._send(Call("POST", f"/api/messages/{_seg(message_id)}/republish/",
                               parse=_one(models.MessageStatus)))

    @route("POST", "/api/messages/{id}/resend/")
    def resend(self, message_id: str):
        return self._send(Call("POST", f"/api/messages/{_seg(message_id)}/resend/",
                               parse=_one(models.MessageStatus)))

    @route("GET", "/api/messages/{id}/attempts/")
    def attempts(self, message_id: str):
        """Its handler attempts, oldest first."""
        return self._list(Call("GET", f"/api/messages/{_seg(message_id)}/attempts/", idempotent=True),
                          models.Attempt)

    @route("POST", "/api/messages/cancel/")
    def cancel_matching(self, *, dry_run: bool = False, team: str | None = None, endpoint: str | None = None,
                        status: str | None = None, schedule: str | None = None, due_before=None, due_after=None,
                        created_before=None, created_after=None):
        """Cancel every pending or published message matching the filters (at least one): the
        platform's worker does it in batches, and this returns the job at once (a BulkJob: its
        ``count`` matched; ``client.bulk_actions.get(job.id)`` until ``finished``). With
        ``dry_run`` only count them: an int, exact up to 10,000 (10,000: that many or more)."""
        body = _matching(dry_run, team, endpoint, status, schedule, due_before, due_after, created_before,
                         created_after)
        return self._send(Call("POST", "/api/messages/cancel/", json=body, idempotent=True,
                               parse=_count if dry_run else _one(models.BulkJob)))

    @route("POST", "/api/messages/republish/")
    def republish_matching(self, *, dry_run: bool = False, team: str | None = None, endpoint: str | None = None,
                           status: str | None = None, schedule: str | None = None, due_before=None,
                           due_after=None, created_before=None, created_after=None):
        """Republish every failed message matching the filters: a job, as ``cancel_matching``'s;
        with ``dry_run`` only count them."""
        body = _matching(dry_run, team, endpoint, status, schedule, due_before, due_after, created_before,
                         created_after)
        return self._send(Call("POST", "/api/messages/republish/", json=body, idempotent=dry_run,
                               parse=_count if dry_run else _one(models.BulkJob)))

    @route("POST", "/api/messages/{id}/claim/")
    def claim(self, message_id: str, *, redelivered: bool = False, worker: str | None = None):
        """For a worker about to run a task that came out of the cascade: record its arrival and
        learn whether to run it (``run`` false: cancelled, or a copy of one already run). A retry
        after an unknown outcome claims as a redelivery, so a lost answer never loses the run."""
        body = _fields(redelivered=redelivered, worker=worker)
        return self._send(Call("POST", f"/api/messages/{_seg(message_id)}/claim/", json=body, idempotent=True,
                               retried_json={**body, "redelivered": True}, parse=_one(models.Claim)))

    @route("POST", "/api/messages/{id}/ended/")
    def ended(self, message_id: str, *, retrying: bool = False):
        """For a worker whose claimed task ended, when the claim answered ``ordered``: the task's
        ordering key is let go and the next message of the key goes (``retrying``: kept for the
        retry). Reporting twice, or for a message that holds no turn, changes nothing."""
        return self._send(Call("POST", f"/api/messages/{_seg(message_id)}/ended/", json={"retrying": bool(retrying)},
                               idempotent=True, parse=_one(models.TaskEnd)))

    @route("POST", "/api/messages/cancel-task/")
    def cancel_task(self, task_id: str, *, endpoint: str | None = None, team: str | None = None) -> int:
        """Cancel every waiting run of a Celery task id (its first run and its delayed retries);
        returns how many. Stored: a worker started later skips them too."""
        body = _fields(task_id=task_id, endpoint=endpoint, team=team)
        return self._send(Call("POST", "/api/messages/cancel-task/", json=body, idempotent=True, parse=_count))


def _matching(dry_run, team, endpoint, status, schedule, due_before, due_after, created_before, created_after):
    times = {name: _time(value, name) for name, value in (("due_before", due_before), ("due_after", due_after),
                                                           ("created_before", created_before),
                                                           ("created_after", created_after)) if value is not None}
    return _fields(dry_run=dry_run, team=team, endpoint=endpoint, status=status, schedule=schedule, **times)


class Schedules(Resource):
    @route("POST", "/api/schedules/")
    def upsert(self, key: str, endpoint: str, payload: Any, *, cron: str | None = None, timezone: str | None = None,
               interval=None, start_at=None, end_at=None, missed_runs: str | None = None, jitter=None,
               catchup=None, overlap: str | None = None, team: str | None = None):
        """Create the schedule ``key`` or make it exactly this (``created`` says which): a cron
        rule read in ``timezone`` (IANA, default UTC), or every ``interval`` seconds. ``jitter``
        (seconds or a timedelta): each run is due a fixed offset in [0, jitter) after its time;
        ``catchup``: after a downtime, the missed runs due within it before now are made.
        ``overlap``: a run due while the previous run has not ended is sent anyway (``"allow"``,
        the default), ends ``skipped`` (``"skip"``), or waits for its end, one at most, a later
        one skipped (``"buffer_one"``)."""
        body = _fields(key=key, endpoint=endpoint, payload=payload, cron=cron, timezone=timezone, team=team,
                       interval_seconds=None if interval is None else _seconds(interval, "interval"),
                       start_at=None if start_at is None else _time(start_at, "start_at"),
                       end_at=None if end_at is None else _time(end_at, "end_at"), missed_runs=missed_runs,
                       jitter_seconds=None if jitter is None else _seconds(jitter, "jitter"),
                       catchup_seconds=None if catchup is None else _seconds(catchup, "catchup"), overlap=overlap)
        return self._send(Call("POST", "/api/schedules/", json=body, idempotent=True,
                               parse=_created(models.Schedule)))

    @route("GET", "/api/schedules/{key}/")
    def get(self, key: str, *, team: str | None = None):
        return self._send(Call("GET", f"/api/schedules/{_seg(key)}/", params={"team": team}, idempotent=True,
                               parse=_one(models.Schedule)))

    @route("GET", "/api/schedules/")
    def list(self, *, team: str | None = None):
        return self._list(Call("GET", "/api/schedules/", params={"team": team}, idempotent=True), models.Schedule)

    @route("POST", "/api/schedules/{key}/pause/")
    def pause(self, key: str, *, team: str | None = None):
        return self._send(Call("POST", f"/api/schedules/{_seg(key)}/pause/", params={"team": team},
                               idempotent=True, parse=_one(models.Schedule)))

    @route("POST", "/api/schedules/{key}/resume/")
    def resume(self, key: str, *, team: str | None = None):
        return self._send(Call("POST", f"/api/schedules/{_seg(key)}/resume/", params={"team": team},
                               idempotent=True, parse=_one(models.Schedule)))

    @route("DELETE", "/api/schedules/{key}/")
    def delete(self, key: str, *, team: str | None = None) -> None:
        return self._send(Call("DELETE", f"/api/schedules/{_seg(key)}/", params={"team": team},
                               parse=lambda data, status: None))

    @route("GET", "/api/schedules/preview/")
    def preview(self, *, cron: str | None = None, timezone: str | None = None, interval=None, start_at=None,
                after=None, count: int = 10) -> builtins.list[datetime]:
        """The next ``count`` run times (aware, UTC) of a cron rule or an interval."""
        params = {"cron": cron, "timezone": timezone, "count": count,
                  "interval_seconds": None if interval is None else _seconds(interval, "interval"),
                  "start_at": None if start_at is None else _time(start_at, "start_at"),
                  "after": None if after is None else _time(after, "after")}
        return self._send(Call("GET", "/api/schedules/preview/", params=params, idempotent=True,
                               parse=lambda data, status: [models.parse_time(t) for t in data["runs"]]))


class Endpoints(Resource):
    @route("POST", "/api/endpoints/")
    def create(self, name: str, *, handler: str | None = None, handler_target: str | None = None,
               topology: str | None = None, delivery_mode: str | None = None, webhook_secret: str | None = None,
               max_deliveries_per_second: int | None = None, max_concurrent: int | None = None,
               webhook_timeout_seconds: float | None = None, team: str | None = None, queue: str | None = None,
               max_deliveries_per_second_per_key: int | None = None, max_concurrent_per_key: int | None = None):
        """Create and bind an endpoint (handler ``none``, ``webhook``, ``celery_queue``, ``celery_task``).
        A webhook endpoint's signing secret is in the result's ``webhook_secret``, this once."""
        body = _fields(name=name, handler=handler, handler_target=handler_target, topology=topology,
                       delivery_mode=delivery_mode, webhook_secret=webhook_secret, team=team, queue=queue,
                       max_deliveries_per_second=max_deliveries_per_second, max_concurrent=max_concurrent,
                       max_deliveries_per_second_per_key=max_deliveries_per_second_per_key,
                       max_concurrent_per_key=max_concurrent_per_key, webhook_timeout_seconds=webhook_timeout_seconds)
        return self._send(Call("POST", "/api/endpoints/", json=body, parse=_one(models.Endpoint)))

    @route("GET", "/api/endpoints/{name}/")
    def get(self, name: str, *, team: str | None = None):
        return self._send(Call("GET", f"/api/endpoints/{_seg(name)}/", params={"team": team}, idempotent=True,
                               parse=_one(models.Endpoint)))

    @route("GET", "/api/endpoints/")
    def list(self, *, team: str | None = None):
        return self._list(Call("GET", "/api/endpoints/", params={"team": team}, idempotent=True), models.Endpoint)

    @route("PATCH", "/api/endpoints/{name}/")
    def update(self, name: str, *, team: str | None = None, topology=UNSET, delivery_mode=UNSET,
               max_deliveries_per_second=UNSET, max_concurrent=UNSET, webhook_timeout_seconds=UNSET,
               is_active=UNSET, max_deliveries_per_second_per_key=UNSET, max_concurrent_per_key=UNSET):
        """Change what is given; ``None`` for a limit or the timeout means "none" (the platform's)."""
        changes = {k: v for k, v in dict(topology=topology, delivery_mode=delivery_mode,
                                         max_deliveries_per_second=max_deliveries_per_second,
                                         max_concurrent=max_concurrent, is_active=is_active,
                                         max_deliveries_per_second_per_key=max_deliveries_per_second_per_key,
                                         max_concurrent_per_key=max_concurrent_per_key,
                                         webhook_timeout_seconds=webhook_timeout_seconds).items() if v is not UNSET}
        return self._send(Call("PATCH", f"/api/endpoints/{_seg(name)}/", params={"team": team}, json=changes,
                               idempotent=True, parse=_one(models.Endpoint)))

    def set_flow_limits(self, name: str, *, max_deliveries_per_second=UNSET, max_concurrent=UNSET,
                        team: str | None = None, max_deliveries_per_second_per_key=UNSET, max_concurrent_per_key=UNSET):
        """Flow control across all workers: hand-overs per second, calls at once, and the same per
        flow key of its messages (None: no limit)."""
        return self.update(name, team=team, max_deliveries_per_second=max_deliveries_per_second,
                           max_concurrent=max_concurrent,
                           max_deliveries_per_second_per_key=max_deliveries_per_second_per_key,
                           max_concurrent_per_key=max_concurrent_per_key)

    @route("POST", "/api/endpoints/{name}/activate/")
    def activate(self, name: str, *, team: str | None = None):
        return self._send(Call("POST", f"/api/endpoints/{_seg(name)}/activate/", params={"team": team},
                               idempotent=True, parse=_one(models.Endpoint)))

    @route("POST", "/api/endpoints/{name}/deactivate/")
    def deactivate(self, name: str, *, team: str | None = None):
        return self._send(Call("POST", f"/api/endpoints/{_seg(name)}/deactivate/", params={"team": team},
                               idempotent=True, parse=_one(models.Endpoint)))

    @route("POST", "/api/endpoints/{name}/rotate-secret/")
    def rotate_secret(self, name: str, *, secret: str | None = None, previous_valid_seconds: int | None = None,
                      team: str | None = None):
        """A new signing secret, answered once; the current one keeps signing beside it for
        ``previous_valid_seconds`` (the platform's default: a day)."""
        body = _fields(secret=secret, previous_valid_seconds=previous_valid_seconds)
        return self._send(Call("POST", f"/api/endpoints/{_seg(name)}/rotate-secret/", params={"team": team},
                               json=body, parse=_one(models.SecretRotated)))


class Teams(Resource):
    @route("GET", "/api/teams/")
    def list(self):
        return self._list(Call("GET", "/api/teams/", idempotent=True), models.Team)

    @route("GET", "/api/teams/{name}/")
    def get(self, name: str):
        return self._send(Call("GET", f"/api/teams/{_seg(name)}/", idempotent=True, parse=_one(models.Team)))

    @route("GET", "/api/teams/{name}/members/")
    def members(self, name: str):
        return self._list(Call("GET", f"/api/teams/{_seg(name)}/members/", idempotent=True), models.Member)

    @route("POST", "/api/teams/{name}/members/set/")
    def set_member(self, name: str, username: str, role: str):
        return self._send(Call("POST", f"/api/teams/{_seg(name)}/members/set/",
                               json={"username": username, "role": role}, idempotent=True,
                               parse=_one(models.Member)))

    @route("POST", "/api/teams/{name}/members/remove/")
    def remove_member(self, name: str, username: str) -> None:
        return self._send(Call("POST", f"/api/teams/{_seg(name)}/members/remove/", json={"username": username},
                               parse=lambda data, status: None))

    @route("POST", "/api/teams/{name}/invitations/")
    def invite(self, name: str, username: str, role: str) -> None:
        """Invite ``username`` to the team with ``role`` (team admins): they join when they accept.
        The platform answers the same whether the name is a user or not, so this returns nothing."""
        return self._send(Call("POST", f"/api/teams/{_seg(name)}/invitations/",
                               json={"username": username, "role": role}, parse=lambda data, status: None))

    @route("GET", "/api/teams/{name}/invitations/")
    def invitations(self, name: str):
        """The team's invitations (team admins), newest first."""
        return self._list(Call("GET", f"/api/teams/{_seg(name)}/invitations/", idempotent=True), models.Invitation)

    @route("POST", "/api/teams/{name}/invitations/{invitation_id}/revoke/")
    def revoke_invitation(self, name: str, invitation_id: int):
        return self._send(Call("POST", f"/api/teams/{_seg(name)}/invitations/{_seg(invitation_id)}/revoke/",
                               idempotent=True, parse=_one(models.Invitation)))


class Invitations(Resource):
    """Your own invitations (a person's session or key; a team's key has none)."""

    @route("GET", "/api/invitations/")
    def list(self):
        return self._list(Call("GET", "/api/invitations/", idempotent=True), models.Invitation)

    @route("POST", "/api/invitations/{id}/accept/")
    def accept(self, invitation_id: int):
        """Join the invitation's team with its role."""
        return self._send(Call("POST", f"/api/invitations/{_seg(invitation_id)}/accept/", idempotent=True,
                               parse=_one(models.Invitation)))

    @route("POST", "/api/invitations/{id}/decline/")
    def decline(self, invitation_id: int):
        return self._send(Call("POST", f"/api/invitations/{_seg(invitation_id)}/decline/", idempotent=True,
                               parse=_one(models.Invitation)))


class Keys(Resource):
    @route("GET", "/api/keys/")
    def list(self, *, team: str | None = None):
        return self._list(Call("GET", "/api/keys/", params={"team": team}, idempotent=True), models.ApiKey)

    @route("POST", "/api/keys/")
    def create(self, *, scopes: Iterable[str] = ("all",), team: str | None = None, name: str | None = None,
               expires_in: str | None = None):
        """A team key (people only); the key itself is in the result's ``key``, this once."""
        body = _fields(scopes=list(scopes), team=team, name=name, expires_in=expires_in)
        return self._send(Call("POST", "/api/keys/", json=body, parse=_one(models.ApiKey)))

    @route("POST", "/api/keys/{prefix}/revoke/")
    def revoke(self, prefix: str):
        return self._send(Call("POST", f"/api/keys/{_seg(prefix)}/revoke/", idempotent=True,
                               parse=_one(models.ApiKey)))

    @route("GET", "/api/keys/mine/")
    def mine(self):
        """Your own keys (those that act as you), a person's session or key only."""
        return self._list(Call("GET", "/api/keys/mine/", idempotent=True), models.ApiKey)

    @route("POST", "/api/keys/mine/{prefix}/revoke/")
    def revoke_mine(self, prefix: str):
        """Revoke one of your own keys, and the team keys made with it."""
        return self._send(Call("POST", f"/api/keys/mine/{_seg(prefix)}/revoke/", idempotent=True,
                               parse=_one(models.ApiKey)))


class Audit(Resource):
    @route("GET", "/api/audit/")
    def list(self, *, team: str | None = None, action: str | None = None, object_type: str | None = None,
             object_id: str | None = None, since=None, until=None):
        params = {"team": team, "action": action, "object_type": object_type, "object_id": object_id,
                  "since": None if since is None else _time(since, "since"),
                  "until": None if until is None else _time(until, "until")}
        return self._list(Call("GET", "/api/audit/", params=params, idempotent=True), models.AuditEvent)


class BulkActions(Resource):
    """Bulk cancels and republishes by filter (``messages.cancel_matching``), newest first."""

    @route("GET", "/api/bulk-actions/{id}/")
    def get(self, job_id: int):
        return self._send(Call("GET", f"/api/bulk-actions/{_seg(job_id)}/", idempotent=True,
                               parse=_one(models.BulkJob)))

    @route("GET", "/api/bulk-actions/")
    def list(self, *, team: str | None = None):
        return self._list(Call("GET", "/api/bulk-actions/", params={"team": team}, idempotent=True), models.BulkJob)


class Subscriptions(Resource):
    """A team's endpoints subscribed to topic patterns (a key needs the endpoints scope to change them)."""

    @route("POST", "/api/subscriptions/")
    def create(self, topic: str, endpoint: str, *, filter: dict | None = None, team: str | None = None):
        """Subscribe ``endpoint`` to the pattern ``topic`` (``invoice.*``, ``order.#``); ``filter``:
        ``{"field.path": value or [values]}`` on the payload."""
        body = _fields(topic=topic, endpoint=endpoint, filter=filter, team=team)
        return self._send(Call("POST", "/api/subscriptions/", json=body, parse=_one(models.Subscription)))

    @route("GET", "/api/subscriptions/")
    def list(self, *, team: str | None = None):
        return self._list(Call("GET", "/api/subscriptions/", params={"team": team}, idempotent=True),
                          models.Subscription)

    @route("GET", "/api/subscriptions/{id}/")
    def get(self, subscription_id: str):
        return self._send(Call("GET", f"/api/subscriptions/{_seg(subscription_id)}/", idempotent=True,
                               parse=_one(models.Subscription)))

    @route("DELETE", "/api/subscriptions/{id}/")
    def delete(self, subscription_id: str) -> None:
        return self._send(Call("DELETE", f"/api/subscriptions/{_seg(subscription_id)}/",
                               parse=lambda data, status: None))


class Events(Resource):
    @route("POST", "/api/events/")
    def publish(self, topic: str, payload: Any, *, delay=None, deliver_at=None, idempotency_key: str | None = None,
                on_delivered: str | None = None, on_failed: str | None = None, team: str | None = None,
                traceparent: str | None = None):
        """Publish once to ``topic``: every endpoint of the team subscribed to it gets a message.
        The idempotency key is made here when not given and kept across retries (``created``: this
        call made the event)."""
        body = _fields(topic=topic, payload=payload, team=team, on_delivered=on_delivered, on_failed=on_failed,
                       idempotency_key=idempotency_key or new_idempotency_key(), **_when(delay, deliver_at))
        return self._send(Call("POST", "/api/events/", json=body, idempotent=True, parse=_created(models.Event),
                               headers=trace_headers(traceparent)))

    @route("GET", "/api/events/{id}/")
    def get(self, event_id: str):
        return self._send(Call("GET", f"/api/events/{_seg(event_id)}/", idempotent=True, parse=_one(models.Event)))

    @route("POST", "/api/events/{id}/cancel/")
    def cancel(self, event_id: str) -> int:
        """Cancel the event's messages still waiting: how many."""
        return self._send(Call("POST", f"/api/events/{_seg(event_id)}/cancel/", idempotent=True,
                               parse=lambda data, status: int(data["cancelled"])))


class Notifications(Resource):
    """Notification routes: which of a team's endpoints take which notification types
    (message.failed, message.attempt_failing, endpoint.disabled, endpoint.circuit_opened, quota.warning,
    message.expired)."""

    @route("POST", "/api/notifications/")
    def create(self, endpoint: str, events: Iterable[str], *, team: str | None = None):
        return self._send(Call("POST", "/api/notifications/", json=_fields(endpoint=endpoint, events=list(events),
                                                                           team=team),
                               parse=_one(models.NotificationRoute)))

    @route("GET", "/api/notifications/{id}/")
    def get(self, route_id: str):
        return self._send(Call("GET", f"/api/notifications/{_seg(route_id)}/", idempotent=True,
                               parse=_one(models.NotificationRoute)))

    @route("GET", "/api/notifications/")
    def list(self, *, team: str | None = None):
        return self._list(Call("GET", "/api/notifications/", params={"team": team}, idempotent=True),
                          models.NotificationRoute)

    @route("DELETE", "/api/notifications/{id}/")
    def delete(self, route_id: str) -> None:
        return self._send(Call("DELETE", f"/api/notifications/{_seg(route_id)}/", parse=lambda data, status: None))


class Platform(Resource):
    @route("GET", "/api/schema/")
    def openapi(self) -> dict:
        """The platform's OpenAPI 3 schema."""
        return self._send(Call("GET", "/api/schema/", params={"format": "json"}, idempotent=True))


RESOURCES = {"platform": Platform, "messages": Messages, "schedules": Schedules, "endpoints": Endpoints, "teams": Teams, "keys": Keys,
             "invitations": Invitations, "audit": Audit, "bulk_actions": BulkActions,
             "subscriptions": Subscriptions, "events": Events, "notifications": Notifications}


def routes() -> dict[tuple[str, str], str]:
    """(method, path template) -> the client method that calls it, e.g. ``messages.cancel``."""
    found = {}
    for name, resource in RESOURCES.items():
        for attribute, function in vars(resource).items():
            for method_path in getattr(function, "routes", ()):
                found[method_path] = f"{name}.{attribute}"
    return found

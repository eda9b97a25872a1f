"""What a scheduled message looks like on the wire.

Each row travels as an ordinary Celery task message (protocol 2) for ``scheduling.deliver``
whose ``eta`` is the exact due time. The cascade carries the whole seconds of the remaining
delay minus a safety margin, so the message reaches its endpoint queue a little *before* it is
due and the worker's timer holds the rest (< 1 s + margin): never early, and precise to the
millisecond without a 1 ms cascade (see README, "Precision").

The ``x-dp-*`` headers let tools (migrate_delays, transfer_delays) recompute the remaining
delay of a message found in any level queue.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from django.conf import settings

from topology import cascade
from topology.publisher import Outgoing

from .models import Endpoint, ScheduledMessage, to_epoch_ms

DELIVER_TASK = "scheduling.deliver"
H_MESSAGE_ID = "x-dp-message-id"
H_DUE_AT_MS = "x-dp-due-at-ms"
H_DESTINATION = "x-dp-destination"  # read when present; the routing key also names it
H_VERSION = "x-dp-version"
H_DELAY_MS = "x-dp-delay-ms"  # time the message was set to spend in the cascade
H_PUBLISHED_AT_MS = "x-dp-published-at-ms"


@dataclass(frozen=True)
class Route:
    delay_seconds: int  # whole seconds through the cascade
    exchange: str
    routing_key: str


def cascade_seconds(due_at_ms: int, now_ms: int, version: cascade.Version, held: bool = True) -> int:
    """Whole seconds to spend in the cascade. A message whose consumer holds it until its eta
    (``held``) leaves a little *before* it is due; any other message (a user's Celery task, a
    foreign message) must not arrive early, so its delay is rounded up."""
    remaining = due_at_ms - now_ms
    if held:
        seconds = (remaining - settings.DELAY_ARRIVAL_MARGIN_MS) // version.unit_ms
    else:
        seconds = -(-remaining // version.unit_ms)
    return min(max(0, seconds), version.max_delay)


def route(due_at_ms: int, now_ms: int, version: cascade.Version, destination: str, held: bool = True) -> Route:
    seconds = cascade_seconds(due_at_ms, now_ms, version, held)
    return Route(
        delay_seconds=seconds,
        exchange=cascade.first_exchange(version, seconds),
        routing_key=cascade.routing_key(seconds, destination, version.levels),
    )


def direct_route(destination: str) -> Route:
    """Straight into the endpoint's queue through the default exchange: what the timeout
    manager uses, so it works even where no cascade could be provisioned."""
    return Route(delay_seconds=0, exchange="", routing_key=cascade.check_destination(destination))


_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def deliver_message(message_id: str, eta: datetime, attempt: int = 0) -> tuple[bytes, dict, dict]:
    """(body, headers, properties) of the Celery protocol-2 message for ``scheduling.deliver``.
    Only the headers Celery's worker reads are sent (it defaults the rest): every header is
    encoded per message, and Celery's full builder with its 19 headers made the relay's
    per-message cost ~0.25 ms, the bulk of it. The e2e tests run these on a real worker."""
    headers = {"lang": "py", "task": DELIVER_TASK, "id": message_id, "root_id": message_id,
               "eta": eta.isoformat(), "retries": 0}
    kwargs = {"attempt": attempt} if attempt else {}
    body = json.dumps([[message_id], kwargs, _EMBED], separators=(",", ":")).encode()
    properties = {"content_type": "application/json", "content_encoding": "utf-8",
                  "correlation_id": message_id, "message_id": message_id}
    return body, headers, properties


def retry(message, message_id: str, attempt: int, eta: datetime) -> Outgoing:
    """The next handler attempt of a delivered message: the same message with ``attempt`` and a
    new eta, back where it came from (the delivery exchange with its key, or the queue)."""
    body, headers, properties = deliver_message(message_id, eta, attempt)
    kept = {k: v for k, v in (message.headers or {}).items() if k.startswith("x-dp-")}
    info = message.delivery_info
    return Outgoing(info.get("exchange", ""), info["routing_key"], body, {**kept, **headers}, properties)


def _x_dp_headers(message: ScheduledMessage, version: cascade.Version, r: Route, now_ms: int) -> dict:
    return {
        H_MESSAGE_ID: str(message.id),
        H_DUE_AT_MS: message.due_at_ms,
        H_VERSION: version.name,
        H_DELAY_MS: r.delay_seconds * version.unit_ms,
        H_PUBLISHED_AT_MS: now_ms,
    }


def outgoing(
    message: ScheduledMessage, version: cascade.Version, now: datetime, direct: bool = False
) -> tuple[Outgoing, Route]:
    """The publish of one row: through the cascade of ``version`` to its endpoint's queue (or,
    ``direct``, straight to the queue)."""
    if message.endpoint.handler == Endpoint.Handler.CELERY_QUEUE:
        return outgoing_task(message, version, now, direct)
    now_ms, due_ms = to_epoch_ms(now), message.due_at_ms
    r = direct_route(message.endpoint.name) if direct else route(due_ms, now_ms, version, message.endpoint.name)
    body, headers, properties = deliver_message(str(message.id), message.due_at)
    headers.update(_x_dp_headers(message, version, r, now_ms))
    return Outgoing(r.exchange, r.routing_key, body, headers, properties), r


def outgoing_task(
    message: ScheduledMessage, version: cascade.Version, now: datetime, direct: bool = False
) -> tuple[Outgoing, Route]:
    """A user's Celery task message, exactly as apply_async built it (scheduling.celery), into
    the task's queue; no eta, so an unmodified worker runs it the moment it arrives."""
    captured = message.payload["celery"]
    now_ms = to_epoch_ms(now)
    if direct:
        r = direct_route(message.endpoint.name)
    else:
        r = route(message.due_at_ms, now_ms, version, message.endpoint.name, held=False)
    headers = {**captured["headers"], "eta": None, **_x_dp_headers(message, version, r, now_ms)}
    properties = {**captured["properties"], "content_type": captured["content_type"],
                  "content_encoding": captured["content_encoding"], "message_id": str(message.id)}
    return Outgoing(r.exchange, r.routing_key, captured["body"].encode(captured["content_encoding"]), headers,
                    properties), r


# --- reading a message found in a level queue (migrate_delays, transfer_delays) ---------------

STRIPPED_ON_MOVE = ("x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason")


@dataclass(frozen=True)
class Found:
    """What a queued message says about itself; ``due_at_ms`` None means it cannot be moved."""

    due_at_ms: int | None
    destination: str | None
    message_id: str | None
    published_at_ms: int | None


def _epoch_ms(value) -> int | None:
    if isinstance(value, datetime):
        return to_epoch_ms(value if value.tzinfo else value.replace(tzinfo=timezone.utc))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value * 1000) if value < 10**11 else int(value)  # AMQP timestamps are seconds
    return None


def _int_header(headers: dict, name: str) -> int | None:
    value = headers.get(name)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def read_found(headers: dict, properties: dict, routing_key: str, version: cascade.Version) -> Found:
    """Due time from ``x-dp-due-at-ms``; failing that, arrival time (``x-dp-published-at-ms``
    or the AMQP timestamp) plus the requested delay (``x-dp-delay-ms`` or the delay the routing
    key encodes). Neither: ``due_at_ms`` is None and the message goes to the poison queue."""
    headers = headers or {}
    try:
        key_delay, key_destination = cascade.parse_routing_key(routing_key, version.levels)
    except ValueError:
        key_delay, key_destination = None, None
    destination = headers.get(H_DESTINATION) or key_destination
    published = _int_header(headers, H_PUBLISHED_AT_MS)
    due = _int_header(headers, H_DUE_AT_MS)
    if due is None:
        arrival = published if published is not None else _epoch_ms(properties.get("timestamp"))
        delay = _int_header(headers, H_DELAY_MS)
        if delay is None and key_delay is not None:
            delay = key_delay * version.unit_ms
        due = arrival + delay if arrival is not None and delay is not None else None
    if not isinstance(destination, str) or not cascade.DESTINATION_RE.match(destination):
        due, destination = None, None
    message_id = headers.get(H_MESSAGE_ID)
    return Found(due, destination, message_id if isinstance(message_id, str) else None, published)


def moved(out_headers: dict, properties: dict, body: bytes, found: Found, version: cascade.Version,
          now_ms: int) -> tuple[Outgoing, Route]:
    """The same message republished into ``version`` with its remaining delay: ``x-death``
    stripped, headers updated so the next tool (or the consumer) sees where it is now. Only a
    message with an ``eta`` (held by its consumer) may leave the cascade before it is due."""
    r = route(found.due_at_ms, now_ms, version, found.destination, held=bool((out_headers or {}).get("eta")))
    headers = {k: v for k, v in (out_headers or {}).items() if k not in STRIPPED_ON_MOVE}
    headers.update({
        H_DUE_AT_MS: found.due_at_ms,
        H_DESTINATION: found.destination,
        H_VERSION: version.name,
        H_DELAY_MS: r.delay_seconds * version.unit_ms,
        H_PUBLISHED_AT_MS: now_ms,
    })
    keep = ("content_type", "content_encoding", "correlation_id", "message_id", "reply_to", "priority",
            "timestamp", "type", "app_id")
    props = {k: properties[k] for k in keep if properties.get(k) is not None}
    return Outgoing(r.exchange, r.routing_key, body, headers, props), r

"""What a scheduled message looks like on the wire: building it, and reading it back. Pure.

Each row travels as an ordinary Celery task message (protocol 2) for ``scheduling.deliver``
whose ``eta`` is the exact due time. The cascade carries the whole units (seconds) of the
remaining delay minus a safety margin, so the message reaches its endpoint queue a little
*before* it is due and the worker's timer holds the rest (< 1 s + margin): never early, and
precise to the millisecond without a 1 ms cascade (see docs/concepts/precision.md).

The ``x-dp-*`` headers let tools (migrate_delays, transfer_delays) recompute the remaining
delay of a message found in any level queue.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from rabbit import Outgoing, Received
from scheduling.core import task_names
from scheduling.core import traceparent as trace_context
from scheduling.core.clock import from_epoch_ms, to_epoch_ms
from scheduling.messages import structured
from scheduling.models import FLOW_KEY_MAX_LENGTH, Endpoint, ScheduledMessage
from topology import cascade, explain

DELIVER_TASK = task_names.DELIVER
ENVELOPE_TASK = task_names.DELIVER_ENVELOPE  # one broker message, many messages (docs/concepts/envelopes.md)
H_MESSAGE_ID = "x-dp-message-id"
H_DUE_AT_MS = "x-dp-due-at-ms"
H_DESTINATION = "x-dp-destination"  # read when present; the routing key also names it
H_VERSION = "x-dp-version"
H_DELAY_MS = "x-dp-delay-ms"  # time the message was set to spend in the cascade
H_PUBLISHED_AT_MS = "x-dp-published-at-ms"
H_POISON_REASON = "x-dp-poison-reason"
H_ENVELOPE = "x-dp-envelope"  # how many messages the envelope carries
FAN_OUT_TASK = task_names.FAN_OUT_EVENT  # an event's one copy in the cascade (docs/concepts/fan-out.md)
H_EVENT = "x-dp-event"  # the event an event copy carries the messages of
FANOUT_QUEUE = cascade.FANOUT_QUEUE
# W3C Trace Context (docs/observability/tracing.md): added only to a message that has one, so a
# message without stays byte for byte what it was (v1/v2 copies are NServiceBus's shape).
H_TRACEPARENT = "traceparent"
H_TRACEPARENTS = "x-dp-traceparents"  # an envelope's: message id -> traceparent, of those that have one
# Flow control by key (docs/guides/flow-control.md "By key"): a message's flow_key travels with it, so
# the delivery loop knows the key of every message it holds without a query per message (or per
# batch: a key is known the moment the message arrives, before its slot is asked for, and held
# messages of many endpoints need no join). Added only to a message that has a key, like the
# traceparent: a message without stays byte for byte what it was (v1/v2 copies: NServiceBus's shape).
H_FLOW_KEY = "x-dp-flow-key"
H_FLOW_KEYS = "x-dp-flow-keys"  # an envelope's: message id -> flow key, of those that have one


Route = cascade.Route  # exchange, routing key and CC keys of a publish, with its whole units


class Unbuildable(ValueError):
    """No broker message can be made of this row (its payload is not what its endpoint's wire
    takes, e.g. a task for a queue that is no longer a Celery queue's, or its queue is not a name
    the cascade carries). The relay and the timeout manager fail the row alone, with this reason
    (lifecycle.unbuildable), and publish the rest of its batch."""


# What building a row reads of it (with its topology's cascade): the relay and the rescue load only
# these (decoding payloads cost ~0.1 ms a row; a Celery queue's rows load theirs apart).
PUBLISH_FIELDS = ("id", "due_at", "topology", "endpoint__queue", "endpoint__handler", "captured_task",
                  "idempotency_key", "traceparent", "event", "expires_at",  # expires_at: messages/expiry.py
                  "flow_key")

# What building a row from a payload that is not what its path expects raises (a missing key, a
# value of another type, an unknown encoding, a destination the cascade cannot carry).
_BUILD_ERRORS = (LookupError, TypeError, AttributeError, ValueError)


def cascade_units(due_at_ms: int, now_ms: int, version: cascade.Version, *, margin_ms: int,
                  held: bool = True) -> int:
    """Whole units to spend in the cascade. A message whose consumer holds it until its eta
    (``held``) leaves ``margin_ms`` or more *before* it is due; any other message (a user's
    Celery task, a foreign message) must not arrive early, so its delay is rounded up."""
    remaining_ms = due_at_ms - now_ms
    if held:
        units = (remaining_ms - margin_ms) // version.unit_ms
    else:
        units = -(-remaining_ms // version.unit_ms)
    return min(max(0, units), version.max_delay_units)


def route(due_at_ms: int, now_ms: int, version: cascade.Version, destination: str, *, margin_ms: int,
          held: bool = True, message_id=None) -> Route:
    """Into the shard of the version that the message's id picks (no id: shard 0)."""
    units = cascade_units(due_at_ms, now_ms, version, margin_ms=margin_ms, held=held)
    return cascade.route(version, units, destination, cascade.shard_of(message_id, version.shards))


def direct_route(destination: str) -> Route:
    """Straight into the endpoint's queue through the default exchange: what the timeout
    manager uses, so it works even where no cascade could be provisioned."""
    return Route(delay_units=0, exchange="", routing_key=cascade.check_destination(destination))


_EMBED = json.dumps({"callbacks": None, "errbacks": None, "chain": None, "chord": None}, separators=(",", ":"))


def _task_message(task: str, task_id: str, eta: datetime, args: str, kwargs: str) -> tuple[bytes, dict, dict]:
    """(body, headers, properties) of a Celery protocol-2 message with ``args`` and ``kwargs``
    already JSON. Only the headers Celery's worker reads are sent (it defaults the rest): every
    header is encoded per message, and Celery's full builder with its 19 headers made the relay's
    per-message cost ~0.25 ms, the bulk of it. The e2e tests run these on a real worker."""
    headers = {"lang": "py", "task": task, "id": task_id, "root_id": task_id, "eta": eta.isoformat(), "retries": 0}
    body = f"[{args},{kwargs},{_EMBED}]".encode()  # one template, per message
    properties = {"content_type": "application/json", "content_encoding": "utf-8",
                  "correlation_id": task_id, "message_id": task_id}
    return body, headers, properties


def deliver_message(message_id: str, eta: datetime, attempt: int = 0) -> tuple[bytes, dict, dict]:
    """(body, headers, properties) of the Celery message for ``scheduling.deliver``."""
    kwargs = f'{{"attempt":{int(attempt)}}}' if attempt else "{}"
    return _task_message(DELIVER_TASK, message_id, eta, f"[{json.dumps(message_id)}]", kwargs)


def retry(message: Received, message_id: str, attempt: int, eta: datetime) -> Outgoing:
    """The next handler attempt of a delivered message: the same message with ``attempt`` and a
    new eta, back where it came from (the delivery exchange with its key, or the queue)."""
    body, headers, properties = deliver_message(message_id, eta, attempt)
    kept = {k: v for k, v in message.headers.items()
            if k.startswith("x-dp-") and k not in (H_ENVELOPE, H_TRACEPARENTS, H_FLOW_KEYS, H_FLOW_KEY)}
    if traceparent := traceparent_of(message.headers, message_id):  # its own, or its envelope's entry
        kept[H_TRACEPARENT] = traceparent
    if flow_key := flow_key_of(message.headers, message_id):
        kept[H_FLOW_KEY] = flow_key
    return Outgoing(message.exchange, message.routing_key, body, {**kept, H_MESSAGE_ID: message_id, **headers},
                    properties)


def sent_traceparent(message: ScheduledMessage) -> str | None:
    """The traceparent a row's broker message carries: the relay's publish span (tracing on), else
    the row's own; None for a row without (or one loaded without the column: never a query here)."""
    fields = message.__dict__
    return fields.get("wire_traceparent") or fields.get("traceparent")


def _x_dp_headers(message: ScheduledMessage, version: cascade.Version, r: Route, now_ms: int) -> dict:
    headers = {
        H_MESSAGE_ID: str(message.id),
        H_DUE_AT_MS: message.due_at_ms,
        H_VERSION: version.name,
        H_DELAY_MS: r.delay_units * version.unit_ms,
        H_PUBLISHED_AT_MS: now_ms,
    }
    if traceparent := sent_traceparent(message):
        headers[H_TRACEPARENT] = traceparent
    if flow_key := message.__dict__.get("flow_key"):  # never a query (a row loaded without it has none here)
        headers[H_FLOW_KEY] = flow_key
    return headers


def outgoing(message: ScheduledMessage, version: cascade.Version, now: datetime, *, margin_ms: int,
             direct: bool = False) -> tuple[Outgoing, Route]:
    """The publish of one row: through the cascade of ``version`` to its endpoint's queue (or,
    ``direct``, straight to the queue). Unbuildable, with the reason, for a row no message can be
    made of."""
    try:
        if message.endpoint.handler == Endpoint.Handler.CELERY_QUEUE:
            return outgoing_task(message, version, now, margin_ms=margin_ms, direct=direct)
        return _outgoing_delivery(message, version, now, margin_ms=margin_ms, direct=direct)
    except Unbuildable:
        raise
    except _BUILD_ERRORS as exc:
        raise Unbuildable(f"cannot be built for {message.endpoint.handler} endpoint "
                          f"{message.endpoint.queue!r}: {type(exc).__name__}: {exc}") from exc


def _outgoing_delivery(message: ScheduledMessage, version: cascade.Version, now: datetime, *, margin_ms: int,
                       direct: bool) -> tuple[Outgoing, Route]:
    now_ms, due_ms = to_epoch_ms(now), message.due_at_ms
    r = (direct_route(message.endpoint.queue) if direct
         else route(due_ms, now_ms, version, message.endpoint.queue, margin_ms=margin_ms, message_id=message.id))
    body, headers, properties = deliver_message(str(message.id), message.due_at)
    headers.update(_x_dp_headers(message, version, r, now_ms), **r.headers)
    return Outgoing(r.exchange, r.routing_key, body, headers, properties), r


# never taken from a captured task message: they would route or copy it elsewhere
_ROUTING_HEADERS = frozenset({cascade.CC_HEADER, "BCC"})


def legacy_captured(message: ScheduledMessage) -> bool:
    """Whether a row made before ``captured_task`` was stored (NULL) is a task the platform
    captured, inferred as that release did from the payload's shape, narrowed to what DelayedTask
    wrote: ``{"celery": ...}`` whose task id is the row's idempotency key (``<id>`` or
    ``<id>#retry<n>``, celery/services.py). New rows say it themselves."""
    payload, key = message.payload, message.idempotency_key
    try:
        task_id = payload["celery"]["headers"]["id"]
    except (LookupError, TypeError):
        return False
    return isinstance(task_id, str) and bool(task_id) and isinstance(key, str) and (
        key == task_id or key.startswith(f"{task_id}#retry"))


def is_captured(message: ScheduledMessage) -> bool:
    """Whether the row's payload is a task message the platform captured (published as captured):
    stored on the row, never read from the payload's shape (a caller's ``{"celery": ...}`` is data)."""
    stored = message.captured_task
    return legacy_captured(message) if stored is None else stored


def outgoing_task(message: ScheduledMessage, version: cascade.Version, now: datetime, *, margin_ms: int,
                  direct: bool = False) -> tuple[Outgoing, Route]:
    """A Celery task into its queue, with no eta, so an unmodified worker runs it the moment it
    arrives: built here from a structured task (``{"task", "args", "kwargs"}``, what the API
    accepts), or as apply_async built it (``{"celery": ...}``, what DelayedTask stores: only for a
    row the platform captured, ``is_captured``). Unbuildable for any other payload."""
    now_ms = to_epoch_ms(now)
    captured_row = is_captured(message)
    if not captured_row and not structured.is_structured(message.payload):
        raise Unbuildable(f"its payload is not a Celery task for queue {message.endpoint.queue!r} "
                          '(a task is {"task": "...", "args": [...], "kwargs": {...}}); was the endpoint\'s '
                          "handler changed after it was scheduled?")
    queue = message.endpoint.queue
    if direct:
        r = direct_route(queue)
    else:
        r = route(message.due_at_ms, now_ms, version, queue, margin_ms=margin_ms, held=False, message_id=message.id)
    if not captured_row:
        task_id = message.payload.get("id") or str(message.id)
        headers = {**structured.task_headers(message.payload, task_id), **_x_dp_headers(message, version, r, now_ms),
                   **r.headers}
        properties = {"content_type": "application/json", "content_encoding": "utf-8", "correlation_id": task_id,
                      "message_id": str(message.id),
                      **({"priority": message.payload["priority"]} if message.payload.get("priority") is not None
                         else {})}
        return Outgoing(r.exchange, r.routing_key, structured.task_body(message.payload), headers, properties), r
    captured = message.payload["celery"]
    own = {k: v for k, v in captured["headers"].items() if k not in _ROUTING_HEADERS}
    headers = {**own, "eta": None, **_x_dp_headers(message, version, r, now_ms), **r.headers}
    properties = {**captured["properties"], "content_type": captured["content_type"],
                  "content_encoding": captured["content_encoding"], "message_id": str(message.id)}
    return Outgoing(r.exchange, r.routing_key, captured["body"].encode(captured["content_encoding"]), headers,
                    properties), r


def envelope_key(message: ScheduledMessage, version: cascade.Version) -> tuple | None:
    """What rows one envelope may carry share: version, shard, endpoint and due second. None: the
    row travels alone (a topic version, a Celery queue's task message)."""
    if not version.envelopes or message.endpoint.handler == Endpoint.Handler.CELERY_QUEUE:
        return None
    return (version.name, cascade.shard_of(message.id, version.shards), message.endpoint.queue,
            message.due_at_ms // 1000)


def outgoing_envelope(messages: list[ScheduledMessage], version: cascade.Version, now: datetime, *,
                      margin_ms: int) -> tuple[Outgoing, Route]:
    """One broker message for rows of one envelope_key: timed by the earliest (it leaves the cascade
    ``margin_ms`` before that one is due, as a single message would) and carrying each row's id and
    due time, which the delivery loop holds each to. Payloads stay in the database."""
    first = min(messages, key=lambda m: m.due_at_ms)
    now_ms = to_epoch_ms(now)
    r = route(first.due_at_ms, now_ms, version, first.endpoint.queue, margin_ms=margin_ms, message_id=first.id)
    envelope_id = str(uuid.uuid4())
    items = json.dumps([[str(m.id), m.due_at_ms] for m in messages], separators=(",", ":"))
    body, headers, properties = _task_message(ENVELOPE_TASK, envelope_id, first.due_at, f"[{items}]", "{}")
    headers.update(_x_dp_headers(first, version, r, now_ms), **r.headers)
    del headers[H_MESSAGE_ID]  # the ids are in the body
    headers.pop(H_TRACEPARENT, None)  # the first message's: each message's is in H_TRACEPARENTS
    headers.pop(H_FLOW_KEY, None)  # the same: each message's is in H_FLOW_KEYS
    headers[H_ENVELOPE] = len(messages)
    traced = {str(m.id): t for m in messages if (t := sent_traceparent(m))}
    if traced:
        headers[H_TRACEPARENTS] = traced
    keyed = {str(m.id): k for m in messages if (k := m.__dict__.get("flow_key"))}
    if keyed:
        headers[H_FLOW_KEYS] = keyed
    return Outgoing(r.exchange, r.routing_key, body, headers, properties), r


def event_key(message: ScheduledMessage, version: cascade.Version) -> tuple | None:
    """What the rows of one event copy share: the event and the version (the shard is the event's).
    None: the row is no event's, or its version keeps one broker message per message (v1, v2)."""
    event_id = message.__dict__.get("event_id")
    if event_id is None or not version.envelopes:
        return None
    return ("event", version.name, str(event_id))


def is_event_group(messages: list[ScheduledMessage]) -> bool:
    """Whether a relay group is an event copy's rows (several rows of one event; the relay makes
    no other group whose rows all name one event, since it takes those first)."""
    first = messages[0].__dict__.get("event_id")
    return len(messages) > 1 and first is not None and all(m.__dict__.get("event_id") == first for m in messages)


def outgoing_event(messages: list[ScheduledMessage], version: cascade.Version, now: datetime, *,
                   margin_ms: int) -> tuple[Outgoing, Route]:
    """An event's one broker message through the cascade, whatever its number of messages: into the
    shard the event's id picks, to the fan-out queue, leaving ``margin_ms`` before the earliest row
    is due (an event's rows share a due time). It carries each row's id and due time; the delivery
    loop holds it until due and publishes each row's own copy to its endpoint (messages/fanout.py)."""
    first = min(messages, key=lambda m: m.due_at_ms)
    event_id = str(first.event_id)
    now_ms = to_epoch_ms(now)
    r = route(first.due_at_ms, now_ms, version, FANOUT_QUEUE, margin_ms=margin_ms, message_id=event_id)
    copy_id = str(uuid.uuid4())
    items = json.dumps([[str(m.id), m.due_at_ms] for m in messages], separators=(",", ":"))
    body, headers, properties = _task_message(FAN_OUT_TASK, copy_id, first.due_at,
                                              f"[{json.dumps(event_id)},{items}]", "{}")
    headers.update(_x_dp_headers(first, version, r, now_ms), **r.headers)
    del headers[H_MESSAGE_ID]  # the ids are in the body
    headers.pop(H_TRACEPARENT, None)  # the rows' copies carry their own (each row's column)
    headers.pop(H_FLOW_KEY, None)  # and their own flow keys
    headers[H_DESTINATION] = FANOUT_QUEUE
    headers[H_EVENT] = event_id
    headers[H_ENVELOPE] = len(messages)
    return Outgoing(r.exchange, r.routing_key, body, headers, properties), r


# --- how a message travels, for people (the admin's message page) --------------------------------


@dataclass(frozen=True)
class Preview:
    """What a message was (or would now be) published with, and its path through the cascade."""

    published: bool  # False: a preview of a publish made now
    exchange: str
    routing_key: str
    delay_units: int
    headers: dict
    path_rows: list[tuple[str, ...]]


def preview(message: ScheduledMessage, now: datetime, *, margin_ms: int) -> Preview:
    """Rebuild the publish from the row (``outgoing`` at ``published_at`` gives the same headers
    and key the relay used). The ``origin`` header names the publishing process, which a rebuild
    cannot know, so it is left out."""
    version = message.topology.cascade
    published = message.published_at is not None and bool(message.routing_key)
    out, r = outgoing(message, version, message.published_at if published else now, margin_ms=margin_ms)
    headers = {k: v for k, v in out.headers.items() if k != "origin"}
    rows = explain.explain_rows(version, r.delay_units, message.endpoint.queue,
                                cascade.shard_of(message.id, version.shards))
    return Preview(published, r.exchange, r.routing_key, r.delay_units, headers, rows)


# --- reading a message at the end of the cascade (the delivery loop) ----------------------------


@dataclass(frozen=True)
class Delivery:
    """A ``scheduling.deliver`` message as the delivery loop needs it."""

    message_id: str
    attempt: int  # 0: the copy that came through the cascade; n: the n-th handler retry
    due_ms: int  # hold it until then
    stamped: bool = True  # due_ms is the due time the platform stamped on it (not a guess from eta or now)
    flow_key: str | None = None  # its endpoint's per-key limits count it under this key (H_FLOW_KEY)

    @property
    def stamped_due_ms(self) -> int | None:
        """The due time this copy was published for, if it says: a rescheduled message's copy
        for its old time is told apart by it (lifecycle.superseded)."""
        return self.due_ms if self.stamped else None


def is_row_id(value) -> bool:
    """Whether an id read off the wire can name a row (a UUID); anything else has no row."""
    try:
        uuid.UUID(value)
    except (TypeError, ValueError, AttributeError):
        return False
    return True


def queue_of_routing_key(routing_key: str) -> str:
    """The destination a cascade routing key names: the key without its leading delay bits
    (``1.0.1.0.orders`` -> ``orders``; a direct version's key is the queue already). For copies
    whose queue the receiver does not know (a Celery worker's task)."""
    return re.sub(r"^(?:[01]\.)+", "", routing_key)


def _iso_ms(value) -> int | None:
    try:
        return to_epoch_ms(datetime.fromisoformat(value)) if isinstance(value, str) else None
    except (ValueError, TypeError):  # not ISO, or naive (cannot be compared with UTC)
        return None


def traceparent_of(headers: dict, message_id: str) -> str | None:
    """The traceparent a delivered copy carries for ``message_id`` (its own header, or its
    envelope's entry); None without one. Checked again (a header is anyone's input)."""
    traced = headers.get(H_TRACEPARENTS)
    value = traced.get(message_id) if isinstance(traced, dict) else headers.get(H_TRACEPARENT)
    return trace_context.parse(value)


def flow_key_of(headers: dict, message_id: str) -> str | None:
    """The flow key a delivered copy carries for ``message_id`` (its own header, or its envelope's
    entry); None without one, or for a value that is no key (a header is anyone's input)."""
    keyed = headers.get(H_FLOW_KEYS)
    value = keyed.get(message_id) if isinstance(keyed, dict) else headers.get(H_FLOW_KEY)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) and 0 < len(value) <= FLOW_KEY_MAX_LENGTH else None


def read_envelope(headers: dict, body: bytes) -> list[Delivery] | None:
    """The messages an envelope carries, each with its own due time; None if it is not one."""
    if headers.get("task") != ENVELOPE_TASK:
        return None
    try:
        (items,), _, _ = json.loads(body)
        deliveries = [Delivery(str(message_id), 0, int(due_ms), flow_key=flow_key_of(headers, str(message_id)))
                      for message_id, due_ms in items]
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        return None
    return deliveries or None


@dataclass(frozen=True)
class EventCopy:
    """A ``scheduling.fan_out_event`` message: the event, its rows with their due times, when the
    relay published it (rows published later were fanned out already: a duplicate skips them)."""

    event_id: str
    items: tuple[Delivery, ...]
    published_at_ms: int | None

    @property
    def due_ms(self) -> int:
        return min(item.due_ms for item in self.items)

    @property
    def ids(self) -> list[str]:
        return [item.message_id for item in self.items]


def read_event_copy(headers: dict, body: bytes) -> EventCopy | None:
    """The event copy a broker message is; None if it is not one (or it is malformed)."""
    if headers.get("task") != FAN_OUT_TASK:
        return None
    try:
        (event_id, items), _, _ = json.loads(body)
        deliveries = tuple(Delivery(str(message_id), 0, int(due_ms)) for message_id, due_ms in items)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        return None
    if not deliveries or not is_row_id(event_id) or not all(is_row_id(d.message_id) for d in deliveries):
        return None
    return EventCopy(str(event_id), deliveries, int_header(headers, H_PUBLISHED_AT_MS))


def envelope_ids(headers: dict, body: bytes) -> list[str]:
    """The ids an envelope carries ([] if it is not one): what a tool that meets it acts on."""
    return [d.message_id for d in read_envelope(headers, body) or []]


def carried_ids(headers: dict, body: bytes) -> list[str]:
    """The rows a broker message stands for: an envelope's, an event copy's, or its own
    ``x-dp-message-id`` when that can name a row ([] for a foreign message)."""
    own = headers.get(H_MESSAGE_ID)
    if (event := read_event_copy(headers, body)) is not None:
        return event.ids
    return envelope_ids(headers, body) or ([own] if is_row_id(own) else [])


def read_deliveries(headers: dict, body: bytes, now_ms: int) -> list[Delivery] | None:
    """What the delivery loop holds for one broker message: its one message, or an envelope's."""
    if headers.get("task") == ENVELOPE_TASK:
        return read_envelope(headers, body)
    delivery = read_delivery(headers, body, now_ms)
    return None if delivery is None else [delivery]


def read_delivery(headers: dict, body: bytes, now_ms: int) -> Delivery | None:
    """The message id, attempt and due time of a delivery message; None if it is not one.

    The due time is ``x-dp-due-at-ms`` (the platform's own); failing that the Celery ``eta``
    (a message built by another producer); failing both, now. A retry is never due before its
    own eta (the backoff), even when ``x-dp-due-at-ms`` says the message was due long ago."""
    if headers.get("task") != DELIVER_TASK:
        return None
    try:
        args, kwargs, _ = json.loads(body)
        message_id, attempt = str(args[0]), int(kwargs.get("attempt", 0))
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        return None
    due = headers.get(H_DUE_AT_MS)
    stamped = isinstance(due, int) and not isinstance(due, bool)
    if not stamped:
        due = _iso_ms(headers.get("eta"))
        due = now_ms if due is None else due
    if attempt and (eta := _iso_ms(headers.get("eta"))) is not None:
        due = max(due, eta)
    return Delivery(message_id, attempt, due, stamped, flow_key_of(headers, message_id))


# --- reading a message found in a level queue (migrate_delays, transfer_delays) ---------------

# what the old cascade added (x-death) or routed by (CC: the old version's bit keys)
STRIPPED_ON_MOVE = ("x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
                    cascade.CC_HEADER, "BCC")


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


def int_header(headers: dict, name: str) -> int | None:
    value = headers.get(name)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def read_found(headers: dict, properties: dict, routing_key: str, version: cascade.Version) -> Found:
    """Due time from ``x-dp-due-at-ms``; failing that, arrival time (``x-dp-published-at-ms``
    or the AMQP timestamp) plus the requested delay (``x-dp-delay-ms`` or the delay the routing
    key encodes). Neither: ``due_at_ms`` is None and the message goes to the poison queue."""
    headers = headers or {}
    key_delay_units, key_destination = cascade.read_route(version, routing_key, headers.get(cascade.CC_HEADER))
    destination = headers.get(H_DESTINATION) or key_destination
    published = int_header(headers, H_PUBLISHED_AT_MS)
    due = int_header(headers, H_DUE_AT_MS)
    if due is None:
        arrival = published if published is not None else _epoch_ms(properties.get("timestamp"))
        delay_ms = int_header(headers, H_DELAY_MS)
        if delay_ms is None and key_delay_units is not None:
            delay_ms = key_delay_units * version.unit_ms
        due = arrival + delay_ms if arrival is not None and delay_ms is not None else None
    if not isinstance(destination, str) or not cascade.DOTTED_DESTINATION_RE.match(destination):
        due, destination = None, None
    message_id = headers.get(H_MESSAGE_ID)
    return Found(due, destination, message_id if isinstance(message_id, str) else None, published)


def moved(out_headers: dict, properties: dict, body: bytes, found: Found, version: cascade.Version,
          now_ms: int, *, margin_ms: int) -> tuple[Outgoing, Route]:
    """The same message republished into ``version`` with its remaining delay: ``x-death``
    stripped, headers updated so the next tool (or the consumer) sees where it is now. Only a
    message with an ``eta`` (held by its consumer) may leave the cascade before it is due. It
    goes into the shard its id picks (the platform's id header, else the AMQP message id)."""
    r = route(found.due_at_ms, now_ms, version, found.destination, margin_ms=margin_ms,
              held=bool((out_headers or {}).get("eta")), message_id=found.message_id or properties.get("message_id"))
    headers = {k: v for k, v in (out_headers or {}).items() if k not in STRIPPED_ON_MOVE}
    headers.update({
        H_DUE_AT_MS: found.due_at_ms,
        H_DESTINATION: found.destination,
        H_VERSION: version.name,
        H_DELAY_MS: r.delay_units * version.unit_ms,
        H_PUBLISHED_AT_MS: now_ms,
        **r.headers,
    })
    keep = ("content_type", "content_encoding", "correlation_id", "message_id", "reply_to", "priority",
            "timestamp", "type", "app_id")
    props = {k: properties[k] for k in keep if properties.get(k) is not None}
    return Outgoing(r.exchange, r.routing_key, body, headers, props), r


def moved_envelope(message: Received, found: Found, parts: list[Delivery], version: cascade.Version,
                   now_ms: int, *, margin_ms: int) -> list[tuple[Outgoing, Route, str | None]]:
    """An envelope republished into ``version``: whole, into the shard of its first message, where
    the version carries envelopes; else (v1, v2) split into one ``scheduling.deliver`` message per
    message, each with its own due time, as that version's messages are. (out, route, id): the
    id each publish carries, None for the whole envelope."""
    if version.envelopes:
        out, r = moved(message.headers, message.properties, message.body,
                       replace(found, message_id=parts[0].message_id), version, now_ms, margin_ms=margin_ms)
        return [(out, r, None)]
    singles = []
    for part in parts:
        body, headers, properties = deliver_message(part.message_id, from_epoch_ms(part.due_ms))
        headers[H_MESSAGE_ID] = part.message_id
        if traceparent := traceparent_of(message.headers, part.message_id):  # its entry of the envelope's map
            headers[H_TRACEPARENT] = traceparent
        if part.flow_key:
            headers[H_FLOW_KEY] = part.flow_key
        out, r = moved(headers, properties, body, replace(found, due_at_ms=part.due_ms, message_id=part.message_id),
                       version, now_ms, margin_ms=margin_ms)
        singles.append((out, r, part.message_id))
    return singles


def poisoned(message: Received, reason: str, poison_queue: str) -> Outgoing:
    """A message that cannot be moved, parked whole in the poison queue with the reason."""
    keep = ("content_type", "content_encoding", "correlation_id", "message_id")
    return Outgoing("", poison_queue, message.body, {**message.headers, H_POISON_REASON: reason},
                    {k: v for k, v in message.properties.items() if k in keep})


"""What happens when a message is delivered: nothing (record only), a Celery task, a webhook."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import requests
from celery import current_app
from django.utils import timezone
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

from rabbit import BrokerUnavailable, Outgoing
from scheduling.config.conf import broker, conf
from scheduling.models import Endpoint, ScheduledMessage, Team
from scheduling.security import guards, secret_box, webhook_signing
from scheduling.teams.quotas import team_task_refusal, team_webhook_networks


class _Allowed(threading.local):
    """The networks the current call's team may reach (set by _Sessions.get before each call: a
    thread makes one call at a time, and its kept sessions are keyed by these networks)."""

    networks: tuple = ()


_allowed = _Allowed()


class TeamGrants:
    """Team id -> the team (its webhook networks with the platform's, its task refusal check),
    read at most every DELAY_CONSUMER_SYNC_SECONDS per process: an operator's grant applies within
    seconds. One per process (``team_grants``), owned by the handlers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.of: dict[int, tuple[float, object]] = {}  # team id -> (read at, monotonic; the team or None)

    def team(self, team_id: int):
        now = time.monotonic()
        with self.lock:
            kept = self.of.get(team_id)
        if kept is not None and now - kept[0] < conf().consumer_sync_seconds:
            return kept[1]
        team = Team.objects.filter(pk=team_id).first()
        with self.lock:
            self.of[team_id] = (now, team)
        return team


team_grants = TeamGrants()


def webhook_networks(endpoint: Endpoint) -> tuple:
    """What the endpoint's webhooks may reach besides public addresses: the platform's networks
    and its team's grant."""
    return team_webhook_networks(team=team_grants.team(endpoint.team_id))


def _task_refusal(endpoint: Endpoint) -> str | None:
    team = team_grants.team(endpoint.team_id)
    if team is None:
        return guards.task_refusal(endpoint.handler_target, conf().celery_task_allowlist)
    return team_task_refusal(team=team, task=endpoint.handler_target)


class _CheckedConnection:
    """Connects only to addresses the guard allowed, resolved once here and connected to by IP:
    a name that resolved to a public address for the check cannot resolve inside for the connect
    (DNS rebinding). The Host header and TLS (SNI, certificate) still use the URL's host name."""

    def request(self, *args, **kwargs):
        cut = getattr(_allowed, "cut", None)
        if cut is not None:  # the call's deadline may end it on this connection
            cut.connection = self
        return super().request(*args, **kwargs)

    def _new_conn(self) -> socket.socket:
        host = self._dns_host
        try:
            addresses = guards.checked_addresses(host, self.port, _allowed.networks)
        except socket.gaierror as exc:
            raise NameResolutionError(self.host, self, exc) from exc
        error = None
        for address in addresses:
            self._dns_host = address
            try:
                return super()._new_conn()
            except (NewConnectionError, ConnectTimeoutError) as exc:
                error = exc
            finally:
                self._dns_host = host
        raise error


class _CheckedHTTPConnection(_CheckedConnection, HTTPConnection):
    pass


class _CheckedHTTPSConnection(_CheckedConnection, HTTPSConnection):
    pass


class _CheckedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _CheckedHTTPConnection


class _CheckedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _CheckedHTTPSConnection


class GuardedAdapter(HTTPAdapter):
    """requests' adapter with the checked connections, and never a proxy from the environment
    (the guard checks the peer it connects to, which must be the target)."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _CheckedHTTPPool, "https": _CheckedHTTPSPool}

    def send(self, request, **kwargs):
        return super().send(request, **{**kwargs, "proxies": {}})


def webhook_body(message: ScheduledMessage) -> bytes:
    return payload_body(message.payload)


def payload_body(payload) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def webhook_headers(message: ScheduledMessage, body: bytes, *, timestamp: int) -> dict[str, str]:
    """The headers of a call of ``message`` (its endpoint loaded): signed_headers with the keys
    of the endpoint's valid secrets."""
    headers = signed_headers(_valid_keys(message.endpoint, timezone.now()), message_id=str(message.id),
                             due_at=message.due_at, attempt=message.attempts + 1, body=body, timestamp=timestamp)
    if traceparent := handover_traceparent(message):
        headers[H_TRACEPARENT] = traceparent
    return headers


H_TRACEPARENT = "traceparent"  # W3C Trace Context: what a webhook and a handler task are handed (wire.H_TRACEPARENT)


def handover_traceparent(message: ScheduledMessage) -> str | None:
    """The traceparent the delivery hands the message's handler (set on the row by the delivery:
    delivery_receive_many's ``traceparents``), or None."""
    return message.__dict__.get("handover_traceparent")


def signed_headers(keys: list[bytes], *, message_id: str, due_at, attempt: int, body: bytes,
                   timestamp: int) -> dict[str, str]:
    """Standard Webhooks headers (webhook-id is the message id, the same on every attempt;
    webhook-timestamp is this attempt's), signed with the current secret and, until it expires,
    the previous one; the X-Delay-* headers are information."""
    return {
        "Content-Type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": webhook_signing.signature(keys, message_id=message_id, timestamp=timestamp, body=body),
        "X-Delay-Message-Id": message_id,
        "X-Delay-Due-At": due_at.isoformat(),
        "X-Delay-Attempt": str(attempt),
        "X-Delay-Signature": webhook_signing.legacy_signature(keys[0], body),
    }


def _valid_keys(endpoint: Endpoint, now) -> list[bytes]:
    """The signing keys of the endpoint's secrets (opened from their sealed form:
    security/secret_box.py): the current one and, until it expires, the previous one."""
    valid = [secret_box.open(endpoint.webhook_secret)]
    expires_at = endpoint.webhook_secret_previous_expires_at
    if endpoint.webhook_secret_previous and expires_at and expires_at > now:
        valid.append(secret_box.open(endpoint.webhook_secret_previous))
    return [webhook_signing.signing_key(secret) for secret in valid]


@dataclass(frozen=True)
class WebhookProfile:
    """What the delivery loop needs to call an endpoint, read once per sync (not per message)."""

    endpoint_id: int
    team_id: int
    url: str
    keys: tuple[bytes, ...]
    keys_until: object  # when the previous secret stops signing (the profile is read again by then)
    deadline_s: float
    networks: tuple
    limit: int  # calls in flight in this worker: the bulkhead, or max_concurrent if lower
    max_concurrent: int | None
    paused_until_ms: int  # no call before (Retry-After, an open circuit): the endpoint's health
    max_concurrent_per_key: int | None = None  # calls in flight per flow key, across workers

    @property
    def handover(self) -> int:
        """Calls handed to the engine at once: its bulkhead's running and as many ready, which
        start the moment a call ends instead of a turn of the loop later (with max_concurrent,
        only those running: each holds a slot shared by every worker from its take)."""
        return self.limit if self.max_concurrent else 2 * self.limit

    @property
    def lease_s(self) -> float:
        """How long a take holds the row (before the margin): a ready call waits at most one
        deadline for a slot, since the running calls end by theirs, then runs at most one."""
        return self.deadline_s if self.max_concurrent else 2 * self.deadline_s


def webhook_profiles() -> dict[str, WebhookProfile]:
    """Queue name -> profile, of every active webhook endpoint."""
    settings = conf()
    now = timezone.now()
    profiles = {}
    endpoints = (Endpoint.objects.filter(handler=Endpoint.Handler.WEBHOOK, is_active=True)
                 .select_related("health"))
    for endpoint in endpoints:
        deadline = webhook_deadline_s(endpoint)
        limit = settings.webhook_endpoint_concurrency
        if endpoint.max_concurrent:
            limit = min(limit, endpoint.max_concurrent)
        health = getattr(endpoint, "health", None)
        paused = health.paused_until if health is not None and health.paused_until else None
        profiles[endpoint.queue] = WebhookProfile(
            endpoint.id, endpoint.team_id, endpoint.handler_target, tuple(_valid_keys(endpoint, now)),
            endpoint.webhook_secret_previous_expires_at, deadline, tuple(webhook_networks(endpoint)), limit,
            endpoint.max_concurrent, int(paused.timestamp() * 1000) if paused else 0, endpoint.max_concurrent_per_key)
    return profiles


SESSION_MAX_AGE_SECONDS = 60.0  # a kept connection's name is resolved and checked again at least this often
SESSIONS_PER_THREAD = 64  # origins a webhook thread keeps connections to; the least recently used goes


class _Sessions(threading.local):
    """Keep-alive per webhook thread and origin: a new connection per call cost a TCP (and TLS)
    handshake per message. A kept connection goes to the address the guard checked when it
    opened; the allowed networks are part of the key (a change opens new, checked connections),
    and a session older than SESSION_MAX_AGE_SECONDS is closed, so DNS is checked again."""

    def __init__(self):
        self.kept: OrderedDict[tuple, tuple[requests.Session, float]] = OrderedDict()

    def get(self, url: str, networks: tuple) -> requests.Session:
        """A kept session for the origin, whose new connections may reach ``networks`` (besides
        public addresses): the thread's next call uses them."""
        _allowed.networks = networks
        parts = urlsplit(url)
        key = (parts.scheme.lower(), parts.netloc.lower(), networks)
        now = time.monotonic()
        kept = self.kept.pop(key, None)
        if kept and now - kept[1] > SESSION_MAX_AGE_SECONDS:
            kept[0].close()
            kept = None
        if kept is None:
            session = requests.Session()
            session.mount("http://", GuardedAdapter())
            session.mount("https://", GuardedAdapter())
            kept = (session, now)
        self.kept[key] = kept
        while len(self.kept) > SESSIONS_PER_THREAD:
            self.kept.popitem(last=False)[1][0].close()
        return kept[0]

    def drop(self, url: str) -> None:
        """After a failed call: its connection may be broken or half-read."""
        parts = urlsplit(url)
        for key in [k for k in self.kept if k[:2] == (parts.scheme.lower(), parts.netloc.lower())]:
            self.kept.pop(key)[0].close()


_sessions = _Sessions()


class _Cut:
    """A call's deadline: a timer shuts the call's socket down when it passes, whatever the server
    does (requests' timeout is per read: an answer dripped a byte at a time never ends by it)."""

    def __init__(self, deadline_s: float):
        self.deadline_s, self.fired, self.connection = deadline_s, False, None
        self.timer = threading.Timer(deadline_s, self.fire)
        self.timer.daemon = True

    def fire(self) -> None:
        self.fired = True
        sock = getattr(self.connection, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns now
            except OSError:
                pass

    def __enter__(self):
        _allowed.cut = self
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()
        _allowed.cut = None


def webhook_deadline_s(endpoint: Endpoint) -> float:
    """One deadline over a whole call of the endpoint's webhook (the engine's and the fallback's)."""
    settings = conf()
    return min(endpoint.webhook_timeout_seconds or settings.webhook_timeout_seconds,
               settings.webhook_timeout_max_seconds)


def post_webhook(message: ScheduledMessage) -> None:
    """POST the payload on a kept connection to the endpoint's origin (_Sessions); redirects are
    not followed, and a target the guard refuses now (DNS or DELAY_WEBHOOK_ALLOWED_NETWORKS changed
    since the endpoint was saved) raises TargetRefused before any new connection, a handler
    failure like any other. The path of the ``scheduling.deliver`` task (a worker without the
    delivery loop), bounded as the engine's calls are: one deadline over the whole call, the
    answer read up to DELAY_WEBHOOK_RESPONSE_MAX_BYTES."""
    body, url = webhook_body(message), message.endpoint.handler_target
    deadline_s, cap = webhook_deadline_s(message.endpoint), conf().webhook_response_max_bytes
    try:
        with _Cut(deadline_s) as cut:
            try:
                response = _sessions.get(url, webhook_networks(message.endpoint)).post(
                    url, data=body, headers=webhook_headers(message, body, timestamp=int(time.time())),
                    timeout=(deadline_s, deadline_s), allow_redirects=False, stream=True)
                with response:
                    answer = response.raw.read(cap + 1, decode_content=True)
            except Exception as exc:
                if cut.fired:
                    raise requests.Timeout(f"deadline passed ({deadline_s:g} s)") from exc
                raise
            if cut.fired:
                raise requests.Timeout(f"deadline passed ({deadline_s:g} s)")
        if len(answer) > cap:
            raise RuntimeError(f"webhook answer over {cap} bytes")
    except Exception:
        _sessions.drop(url)
        raise
    if not 200 <= response.status_code < 300:
        raise RuntimeError(f"webhook answered {response.status_code}")


def _task_headers(message: ScheduledMessage) -> dict:
    headers = {"dp_message_id": str(message.id), "dp_due_at": message.due_at.isoformat()}
    if getattr(message, "ordering_key", None) is not None:  # its key's turn ends when the task ends (claim.py)
        headers["dp_ordered"] = 1
    if traceparent := handover_traceparent(message):
        headers[H_TRACEPARENT] = traceparent  # the task's self.request.traceparent
    return headers


_declared: set[tuple[str, str]] = set()  # (broker URL, task queue) this process declared, as send_task would


def _declare_once(queue) -> None:
    key = (broker().url, queue.name)
    if key not in _declared:
        with broker().session() as session:
            session.declare_task_queue(queue)
        _declared.add(key)


def celery_task_outgoing(message: ScheduledMessage) -> Outgoing:
    """The message Celery's ``send_task`` would send (its own protocol-2 builder and router), as
    one item of a batch published with a window of confirms. The named task gets the payload as
    its one argument; its task id is the message id, so a task can tell a repeated hand-over
    (at-least-once) from a new message."""
    app, name, args = current_app, message.endpoint.handler_target, [message.payload]
    queue = app.amqp.router.route({}, name, args, {})["queue"]
    _declare_once(queue)
    task = app.amqp.as_task_v2(str(message.id), name, args=args, kwargs={})
    body = json.dumps(task.body, separators=(",", ":")).encode()  # CELERY_TASK_SERIALIZER is json
    return Outgoing(queue.exchange.name, queue.routing_key or queue.name, body, {**task.headers, **_task_headers(message)},
                    {**task.properties, "content_type": "application/json", "content_encoding": "utf-8",
                     "delivery_mode": 2, "priority": 0})


# How long the delivery loop waits for the broker to confirm a batch's handler tasks. A task queue
# whose quorum leader was just lost confirms only once a new leader is elected; waiting out the
# publisher's 30 s would hold every delivery behind it. Unconfirmed by then: postponed.
TASK_CONFIRM_SECONDS = 3.0


@dataclass
class TaskSends:
    """What became of a batch's handler tasks, by index: ``refused`` cannot run (the allowlist, no
    queue takes the task: a handler failure, retried with the handler's backoff); ``unsent`` the
    broker did not take now (connection lost, nacked, not confirmed in time: the delivery is
    postponed, not counted as a handler attempt)."""

    refused: dict[int, str] = field(default_factory=dict)
    unsent: dict[int, str] = field(default_factory=dict)


def send_celery_tasks(messages: list[ScheduledMessage]) -> TaskSends:
    """Send the handler tasks of a batch in one confirmed publish (a window of confirms in
    flight, as the relay does): one at a time, each waited a broker round trip, which on a
    replicated (quorum) task queue held the delivery loop ~6 ms per message (docs/operations/scaling.md)."""
    sends = TaskSends(refused={i: why for i, m in enumerate(messages)  # checked again here: the allowlists may have changed
                               if (why := _task_refusal(m.endpoint))})
    sendable = [i for i in range(len(messages)) if i not in sends.refused]
    if not sendable:
        return sends
    try:
        outcome = broker().publish([celery_task_outgoing(messages[i]) for i in sendable], window=conf().publish_window,
                                   timeout=TASK_CONFIRM_SECONDS)
    except BrokerUnavailable as exc:  # no connection to any node
        sends.unsent.update({i: str(exc) for i in sendable})
        return sends
    for n, why in outcome.failed.items():
        (sends.refused if why.startswith("returned by") else sends.unsent)[sendable[n]] = why
    return sends


def run_handler(message: ScheduledMessage) -> None:
    """The handlers that run one message at a time (celery_task handlers go out by the batch,
    send_celery_tasks)."""
    if message.endpoint.handler == Endpoint.Handler.WEBHOOK:
        post_webhook(message)

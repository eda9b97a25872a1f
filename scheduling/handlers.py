"""What happens when a message is delivered: nothing (record only), a Celery task, a webhook."""

from __future__ import annotations

import hashlib
import hmac
import json

import requests
from celery import current_app

from rabbit import Outgoing

from .conf import broker, conf
from .models import Endpoint, ScheduledMessage

SIGNATURE_HEADER = "X-Delay-Signature"


def sign(secret: str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of the exact request body with the endpoint's secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_body(message: ScheduledMessage) -> bytes:
    return json.dumps(message.payload, separators=(",", ":"), ensure_ascii=False).encode()


def post_webhook(message: ScheduledMessage) -> None:
    endpoint = message.endpoint
    body = webhook_body(message)
    response = requests.post(
        endpoint.handler_target,
        data=body,
        headers={
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(endpoint.webhook_secret, body),
            "X-Delay-Message-Id": str(message.id),
            "X-Delay-Due-At": message.due_at.isoformat(),
            "X-Delay-Attempt": str(message.attempts + 1),
        },
        timeout=conf().webhook_timeout_seconds,
        allow_redirects=False,
    )
    if not 200 <= response.status_code < 300:
        raise RuntimeError(f"webhook answered {response.status_code}")


def _task_headers(message: ScheduledMessage) -> dict:
    return {"dp_message_id": str(message.id), "dp_due_at": message.due_at.isoformat()}


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


def send_celery_tasks(messages: list[ScheduledMessage]) -> dict[int, str]:
    """Send the handler tasks of a batch in one confirmed publish (a window of confirms in
    flight, as the relay does): one at a time, each waited a broker round trip, which on a
    replicated (quorum) task queue held the delivery loop ~6 ms per message (docs/scaling.md).
    Returns index -> why, for the ones the broker did not take."""
    if not messages:
        return {}
    outcome = broker().publish([celery_task_outgoing(m) for m in messages], window=conf().publish_window)
    failed = dict(outcome.failed)
    if outcome.error:
        failed.update({i: outcome.error for i in range(len(messages)) if i not in outcome.confirmed})
    return failed


def run_handler(message: ScheduledMessage) -> None:
    """The handlers that run one message at a time (celery_task handlers go out by the batch,
    send_celery_tasks)."""
    if message.endpoint.handler == Endpoint.Handler.WEBHOOK:
        post_webhook(message)

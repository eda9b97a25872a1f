"""What happens when a message is delivered: nothing (record only), a Celery task, a webhook."""

from __future__ import annotations

import hashlib
import hmac
import json

import requests
from celery import current_app

from .conf import conf
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


def send_celery_task(message: ScheduledMessage) -> None:
    """The named task gets the payload as its one argument; its task id is the message id, so
    a task can tell a repeated hand-over (at-least-once) from a new message."""
    current_app.send_task(
        message.endpoint.handler_target,
        args=[message.payload],
        task_id=str(message.id),
        headers={"dp_message_id": str(message.id), "dp_due_at": message.due_at.isoformat()},
    )


def run_handler(message: ScheduledMessage) -> None:
    handler = message.endpoint.handler
    if handler == Endpoint.Handler.WEBHOOK:
        post_webhook(message)
    elif handler == Endpoint.Handler.CELERY_TASK:
        send_celery_task(message)

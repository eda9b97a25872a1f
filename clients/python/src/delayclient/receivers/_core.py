"""Verifying one webhook request, and a Receiver that also refuses the ids already handled."""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import standardwebhooks
from standardwebhooks.webhooks import WebhookVerificationError

from ..errors import WebhookError, WebhookReplayed
from .stores import MemoryStore, SeenStore

# The platform's payloads are at most 256 KiB of JSON (DELAY_MAX_PAYLOAD_BYTES, its default);
# four times that leaves room for a platform configured higher and bounds what is hashed.
MAX_BODY = 1024 * 1024
MAX_HEADER = 1024  # an id is a UUID, a signature 47 characters (two during a rotation)
# standardwebhooks' own check is a fixed 5 minutes, so a wider tolerance could not be honoured.
MAX_TOLERANCE = 300
HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
_PREFIX = "whsec_"

Secret = str | Callable[[], str | None]
"""A secret, or a function returning it at each request (read from settings or the environment,
so a rotation needs no restart)."""


@dataclass(frozen=True)
class Webhook:
    """A verified webhook: ``id`` is the platform's message id, the same on every attempt (what
    to deduplicate on); ``timestamp`` this attempt's, UTC; ``payload`` the message's payload
    (the body is the payload's JSON alone, no envelope); ``body`` the bytes as signed."""

    id: str
    timestamp: datetime
    payload: Any
    body: bytes


def check_secret(secret: str) -> str:
    """``secret`` if it is a ``whsec_`` secret, else ValueError: a misconfiguration, raised as
    such (a server error) rather than as a bad webhook. The library would silently drop
    non-base64 characters and verify with a different key."""
    if not isinstance(secret, str) or not secret.startswith(_PREFIX):
        raise ValueError("a webhook secret is whsec_ followed by base64 (as the platform answered it)")
    try:
        encoded = secret[len(_PREFIX):]
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)  # padding optional
    except (binascii.Error, ValueError):
        raise ValueError("the webhook secret's part after whsec_ is not base64") from None
    if not key:
        raise ValueError("the webhook secret is empty")
    return secret


def _check_tolerance(tolerance: int) -> None:
    if not 0 < tolerance <= MAX_TOLERANCE:
        raise ValueError(f"tolerance must be 1 to {MAX_TOLERANCE} seconds "
                         "(standardwebhooks checks 5 minutes itself)")


def _headers(headers: Mapping) -> dict[str, str]:
    """The three Standard Webhooks headers, whatever the case of their names (Django's, Flask's,
    Starlette's headers, a plain dict); Starlette's items() lists a repeated header each time."""
    found: dict[str, str] = {}
    for name, value in headers.items():
        name = name.lower() if isinstance(name, str) else name
        if name not in HEADERS:
            continue
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if not isinstance(value, str):
            raise WebhookError(f"header {name} is not text")
        if len(value) > MAX_HEADER:
            raise WebhookError(f"header {name} is over {MAX_HEADER} characters")
        if found.get(name, value) != value:
            raise WebhookError(f"header {name} is given twice")
        found[name] = value
    missing = [name for name in HEADERS if not found.get(name)]
    if missing:
        raise WebhookError("missing header " + ", ".join(missing))
    return found


def _timestamp(value: str, tolerance: int) -> datetime:
    if not (value.isascii() and value.isdigit() and len(value) <= 12):
        raise WebhookError("header webhook-timestamp is not Unix seconds")
    age = time.time() - int(value)
    if age > tolerance:
        raise WebhookError(f"webhook-timestamp is {age:.0f} s old, over the {tolerance} s tolerance: "
                           "a replay, or a request held up on its way")
    if -age > tolerance:
        raise WebhookError(f"webhook-timestamp is {-age:.0f} s ahead, over the {tolerance} s tolerance: "
                           "check the clocks")
    return datetime.fromtimestamp(int(value), tz=timezone.utc)


def verify(body: bytes | str, headers: Mapping, secret: str, *, previous_secret: str | None = None,
           tolerance: int = MAX_TOLERANCE, max_body: int = MAX_BODY) -> Webhook:
    """The webhook in ``body`` and ``headers`` (the raw body, as received), or WebhookError
    saying why it must not be trusted: a body over ``max_body`` bytes, a missing or oversized
    header, a timestamp more than ``tolerance`` seconds old (a replay, a stuck proxy) or ahead,
    no signature by ``secret`` nor ``previous_secret`` (the old one, held for the window after a
    rotation), a body that is not JSON. A malformed secret is a ValueError."""
    _check_tolerance(tolerance)
    secrets = [check_secret(secret)] + ([check_secret(previous_secret)] if previous_secret else [])
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    elif not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
    body = bytes(body)
    if len(body) > max_body:
        raise WebhookError(f"body over {max_body} bytes")
    found = _headers(headers)
    timestamp = _timestamp(found["webhook-timestamp"], tolerance)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise WebhookError("body is not UTF-8") from None
    for each in secrets:
        try:
            standardwebhooks.Webhook(each).verify(text, found, json_parse=False)
            break
        except WebhookVerificationError as exc:
            if "timestamp" in str(exc):  # at the edge of the window, a moment after ours
                raise WebhookError("webhook-timestamp is outside the tolerance") from None
        except ValueError:  # not "v1,<base64>": the library's split or b64decode
            raise WebhookError("header webhook-signature is malformed: expected v1,<base64> "
                               "separated by spaces") from None
    else:
        either = " or the previous secret" if previous_secret else ""
        raise WebhookError(f"no signature matches the secret{either}")
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError):
        raise WebhookError("body is not JSON") from None
    return Webhook(id=found["webhook-id"], timestamp=timestamp, payload=payload, body=body)


def _read(secret: Secret | None) -> str | None:
    return secret() if callable(secret) else secret


class Receiver:
    """verify() with the ids already handled refused as WebhookReplayed. Call ``done(webhook)``
    once the handler succeeded: before that the id is not remembered, so a failed handling is
    delivered again by the platform and handled then.

    ``remember`` is how long an id handled is kept (1 hour): at least twice ``tolerance``, the
    time a captured request stays within its window; longer, to also catch the platform's own
    redeliveries, which carry a fresh timestamp. ``seen`` is where (MemoryStore: this process).
    Two deliveries of one id in flight at once are both handled: keep handlers idempotent."""

    def __init__(self, secret: Secret, *, previous_secret: Secret | None = None,
                 tolerance: int = MAX_TOLERANCE, seen: SeenStore | None = None, remember: float = 3600,
                 max_body: int = MAX_BODY):
        _check_tolerance(tolerance)
        for each in (secret, previous_secret):
            if isinstance(each, str) and each:
                check_secret(each)  # fail at start-up, not at the first webhook
        self.secret = secret
        self.previous_secret = previous_secret
        self.tolerance = tolerance
        self.seen = seen if seen is not None else MemoryStore()
        self.remember = max(remember, 2 * tolerance)
        self.max_body = max_body

    def verify(self, body: bytes | str, headers: Mapping) -> Webhook:
        secret = _read(self.secret)
        if not secret:
            raise ValueError("no webhook secret configured")
        webhook = verify(body, headers, secret, previous_secret=_read(self.previous_secret) or None,
                         tolerance=self.tolerance, max_body=self.max_body)
        if self.seen.seen(webhook.id):
            raise WebhookReplayed(f"webhook {webhook.id} was already handled")
        return webhook

    def done(self, webhook: Webhook) -> None:
        self.seen.add(webhook.id, self.remember)

    def check_length(self, content_length: str | int | None) -> None:
        """Refuse a declared Content-Length over the bound before the body is read."""
        if too_long(content_length, self.max_body):
            raise WebhookError(f"body over {self.max_body} bytes")

    def answered(self, webhook: Webhook, status_code: int) -> None:
        """The handler answered: a 2xx is what the platform counts as delivered, so the id is
        handled; anything else is delivered again."""
        if 200 <= status_code < 300:
            self.done(webhook)


def make_receiver(secret: Secret | None, previous_secret: Secret | None, receiver: Receiver | None,
                  tolerance: int) -> Receiver:
    """The framework helpers' receiver: the one given (to share its store), or one of its own."""
    if receiver is not None:
        if secret is not None or previous_secret is not None:
            raise TypeError("give a receiver or secrets, not both")
        return receiver
    if secret is None:
        raise TypeError("a webhook secret (or a receiver) is required")
    return Receiver(secret, previous_secret=previous_secret, tolerance=tolerance)


def too_long(content_length: str | int | None, max_body: int) -> bool:
    """Whether a declared Content-Length is over the bound: refused before the body is read."""
    try:
        return content_length is not None and int(content_length) > max_body
    except ValueError:
        return False

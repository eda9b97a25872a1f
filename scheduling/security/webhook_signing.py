"""Webhook secrets and signatures in the Standard Webhooks format (standardwebhooks.com), so
receivers verify with the published libraries and reject replays by the timestamp.

A secret is ``whsec_<base64 of the key>``; the signature is
``v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">``, one per valid secret,
space-separated (during a rotation's overlap, the new and the previous secret both sign)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Iterable

PREFIX = "whsec_"
KEY_BYTES = 32  # generated keys; the spec asks for 24 to 64 random bytes
MIN_KEY_BYTES, MAX_KEY_BYTES = 24, 64
FORMAT = f"{PREFIX} followed by the base64 of {MIN_KEY_BYTES} to {MAX_KEY_BYTES} random bytes"


def generate_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()


def secret_problem(secret: str) -> str | None:
    """Why a secret someone gives us cannot be used, or None."""
    if not secret.startswith(PREFIX):
        return f"must be {FORMAT} (leave it out to have one generated)"
    try:
        key = base64.b64decode(secret[len(PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        return f"must be {FORMAT}: the part after {PREFIX} is not base64"
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        return f"must be {FORMAT}, not {len(key)} bytes"
    return None


def signing_key(secret: str) -> bytes:
    """The HMAC key of a stored secret. A secret without the prefix (a row written around the
    migration that converted them) is its UTF-8 bytes, as the key always was."""
    if secret.startswith(PREFIX):
        return base64.b64decode(secret[len(PREFIX):] + "==")
    return secret.encode()


def from_legacy(secret: str) -> str:
    """A secret from before the Standard Webhooks format (its UTF-8 bytes were the key) in that
    format, with the same key: receivers keep their key."""
    return PREFIX + base64.b64encode(secret.encode()).decode()


def signature(keys: Iterable[bytes], *, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header: ``v1,<base64>`` per key, space-separated."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return " ".join("v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
                    for key in keys)


def legacy_signature(key: bytes, body: bytes) -> str:
    """``X-Delay-Signature: sha256=<hex HMAC-SHA256 of the body>``, kept for receivers written
    before the standard headers (no timestamp: it cannot tell a replay)."""
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()

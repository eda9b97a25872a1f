"""API keys as text: made with 256 bits from the OS's generator, stored as a SHA-256 digest (a
key that random cannot be guessed back from its digest, so no slow hash is needed) beside a
short prefix people recognise it by. Pure."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "dpk_"
PREFIX_LENGTH = 12  # "dpk_" and 8 characters: shown in lists, the audit log and the admin
SCHEMES = ("bearer", "token")  # Authorization: Bearer <key>; Token <key> for keys migrated from DRF


def key_generate() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_prefix(key: str) -> str:
    """What a key is listed by: a new key's first 12 characters, a migrated token's first 8."""
    return key[:PREFIX_LENGTH] if key.startswith(KEY_PREFIX) else key[:8]


def key_matches(key: str, digest: str) -> bool:
    return hmac.compare_digest(key_digest(key), digest)

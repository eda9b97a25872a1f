"""Webhook signing secrets encrypted at rest: a database dump or a read-only SQL login must not
be enough to sign webhooks as the platform.

A sealed value is ``enc1:<Fernet token>`` (AES-128-CBC with HMAC-SHA256; the ``enc1`` names this
scheme, should another follow). The keys are DELAY_SECRETS_KEYS: the first seals, every one opens
(MultiFernet), so a key is rotated by putting a new one first, running ``manage.py
rotate_secrets_key`` and then dropping the old one (docs/security.md#webhook-secrets-at-rest).
Unset, one key is derived from SECRET_KEY, so development and tests need nothing; production
refuses to start without the setting (delayplatform/settings.py).

:func:`open` returns a value without the prefix as it is: rows written in clear by processes
still running the code before migration 0020 (a rolling upgrade) keep signing; the migration, and
any later ``rotate_secrets_key``, seal them. Opened values are cached by their sealed text, since
the delivery loop signs every webhook call."""

from __future__ import annotations

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from scheduling.config.conf import conf, setting_name

PREFIX = "enc1:"
DERIVE_INFO = b"delayplatform webhook secrets at rest v1"  # fixed: a new info would be a new key
OPENED_CACHE = 4096  # opened secrets kept per process (two per webhook endpoint at most)


class SealedWithUnknownKey(Exception):
    """A sealed value none of the keys opens: a key is missing (dropped too early) or wrong."""


@functools.lru_cache(maxsize=4)
def derived_key(secret_key: str) -> bytes:
    """The Fernet key used while DELAY_SECRETS_KEYS is unset: HKDF-SHA256 of SECRET_KEY."""
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=DERIVE_INFO).derive(secret_key.encode())
    return base64.urlsafe_b64encode(raw)


class _Box:
    """The keys as one MultiFernet, and the values it opened (thread-safe: lru_cache)."""

    def __init__(self, keys: tuple[bytes, ...], configured: bool):
        self.configured = configured
        self.first = Fernet(keys[0])
        self.fernet = MultiFernet([Fernet(key) for key in keys])
        self.open = functools.lru_cache(maxsize=OPENED_CACHE)(self._open)

    def _open(self, stored: str) -> str:
        try:
            return self.fernet.decrypt(stored[len(PREFIX):].encode()).decode()
        except InvalidToken:
            where = (f"the keys of {setting_name('secrets_keys')}" if self.configured
                     else f"the key derived from SECRET_KEY ({setting_name('secrets_keys')} is unset)")
            raise SealedWithUnknownKey(
                f"a webhook secret is sealed with a key that is not among {where}: add the key it was sealed "
                "with after the first, or restore it (docs/security.md#webhook-secrets-at-rest)") from None


@functools.lru_cache(maxsize=8)
def _box(keys: tuple[str, ...], secret_key: str) -> _Box:
    if keys:
        return _Box(tuple(key.encode() for key in keys), configured=True)
    return _Box((derived_key(secret_key),), configured=False)


def _current() -> _Box:
    """The box of the keys configured now (override_settings in tests, too)."""
    return _box(conf().secrets_keys, settings.SECRET_KEY)


def is_sealed(stored: str) -> bool:
    return stored.startswith(PREFIX)


def seal(plain: str) -> str:
    """``enc1:<token>`` with the first key; "" stays "" (no secret is not a secret)."""
    if not plain:
        return ""
    return PREFIX + _current().first.encrypt(plain.encode()).decode()


def open(stored: str) -> str:  # noqa: A001 - the box's verb; the builtin is not used here
    """The secret of a stored value: opened when sealed, as it is when not (written before the
    migration). Raises SealedWithUnknownKey when no key opens it."""
    if not is_sealed(stored):
        return stored
    return _current().open(stored)


def is_sealed_with_first_key(stored: str) -> bool:
    """Whether a stored value needs nothing from rotate_secrets_key ("" needs nothing either)."""
    if not stored:
        return True
    if not is_sealed(stored):
        return False
    try:
        _current().first.decrypt(stored[len(PREFIX):].encode())
    except InvalidToken:
        return False
    return True


def reseal(stored: str) -> str:
    """A stored value sealed with the first key (opened with whichever key opens it)."""
    return seal(open(stored))

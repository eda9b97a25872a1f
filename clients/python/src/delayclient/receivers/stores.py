"""Where a Receiver remembers the webhook ids it has handled.

The platform delivers at least once: the same ``webhook-id`` comes again when an answer was
lost (a worker died mid-call, a call outlived its deadline although the handler succeeded), each
time with a fresh timestamp and signature, so only the id tells a duplicate.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class SeenStore(Protocol):
    """The ids handled, each for ``ttl_seconds``. ``add`` after the handler succeeded only, so
    a failed handling is retried by the platform instead of answered as a duplicate."""

    def seen(self, id: str) -> bool: ...

    def add(self, id: str, ttl_seconds: float) -> None: ...


class MemoryStore:
    """In this process only (one per Receiver), thread-safe, at most ``max_ids``: past it the
    oldest are forgotten, so a burst costs bounded memory. Several processes (gunicorn workers,
    pods) each have their own: share a cache with CacheStore instead."""

    def __init__(self, max_ids: int = 100_000, *, clock: Callable[[], float] = time.monotonic):
        if max_ids < 1:
            raise ValueError("max_ids must be at least 1")
        self.max_ids = max_ids
        self.clock = clock
        self._expiry: OrderedDict[str, float] = OrderedDict()  # id -> monotonic expiry, oldest first
        self._lock = threading.Lock()

    def seen(self, id: str) -> bool:
        with self._lock:
            expiry = self._expiry.get(id)
            if expiry is None:
                return False
            if expiry <= self.clock():
                del self._expiry[id]
                return False
            return True

    def add(self, id: str, ttl_seconds: float) -> None:
        now = self.clock()
        with self._lock:
            self._expiry[id] = now + ttl_seconds
            self._expiry.move_to_end(id)
            # Oldest first: expired ones leave from the front (a shorter ttl added later waits for
            # the ones before it; seen() still checks each expiry), then the cap.
            while self._expiry:
                first_id, first_expiry = next(iter(self._expiry.items()))
                if first_expiry > now and len(self._expiry) <= self.max_ids:
                    break
                del self._expiry[first_id]

    def __len__(self) -> int:
        return len(self._expiry)


_SAFE_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,100}")


class CacheStore:
    """Over a Django-like cache (``get(key)``, ``add(key, value, timeout)``), so the receiver's
    processes share what was handled: ``CacheStore(django.core.cache.caches["default"])``."""

    def __init__(self, cache: Any, *, prefix: str = "delayclient:webhook:"):
        self.cache = cache
        self.prefix = prefix

    def key(self, id: str) -> str:
        # Ids are the platform's UUIDs; anything else is hashed, memcached refusing long keys or spaces.
        if _SAFE_KEY.fullmatch(id):
            return self.prefix + id
        return self.prefix + "sha256:" + hashlib.sha256(id.encode("utf-8", "surrogatepass")).hexdigest()

    def seen(self, id: str) -> bool:
        return self.cache.get(self.key(id)) is not None

    def add(self, id: str, ttl_seconds: float) -> None:
        self.cache.add(self.key(id), 1, max(1, math.ceil(ttl_seconds)))

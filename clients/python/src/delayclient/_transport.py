"""The HTTP underneath both clients: one request description (``Call``), the retry policy, the
mapping of answers to results or errors. Sync and async differ only in how they send and sleep."""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import httpx

from . import errors
from ._version import __version__

USER_AGENT = f"delayplatform-client/{__version__} python/{platform.python_version()} httpx/{httpx.__version__}"
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Call:
    """One API request. ``idempotent``: sending it twice does no more than sending it once (a
    read, a cancel, a message with its idempotency key), so it may be retried after a failure
    whose outcome is unknown. ``parse(data, status)`` turns the decoded answer into the result."""

    method: str
    path: str
    params: dict | None = None
    json: Any = None
    idempotent: bool = False
    parse: Callable[[Any, int], Any] | None = None
    retried_json: Any = None  # the body of a retry, where it must say so (a claim: "redelivered")
    headers: dict | None = None  # this request's own (a traceparent), beside the client's

    def query(self) -> dict | None:
        if not self.params:
            return None
        return {k: _param(v) for k, v in self.params.items() if v is not None}


def _param(value):
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


@dataclass(frozen=True)
class Retry:
    """Retries with exponential backoff and full jitter, for idempotent calls only: after a
    connection failure, a timeout, a 429 (waiting at least its Retry-After, up to
    ``max_retry_after``) or a 5xx."""

    attempts: int = 4
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    statuses: frozenset = field(default=RETRY_STATUSES)

    def wait(self, attempt: int, retry_after: float | None) -> float:
        """Seconds before attempt ``attempt + 1`` (attempt counts from 1)."""
        jittered = random.uniform(0, min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))
        if retry_after is not None:
            return max(jittered, min(retry_after, self.max_retry_after))
        return jittered


NO_RETRY = Retry(attempts=1)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header (seconds, or an HTTP date) in seconds; None when absent or unreadable."""
    if not value or len(value) > 64:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _detail(body) -> str:
    """The readable line of an error answer: DRF's ``detail``, or the first field's first reason."""
    if isinstance(body, dict):
        if isinstance(body.get("detail"), str):
            return body["detail"]
        for name, reasons in body.items():
            reason = reasons[0] if isinstance(reasons, list) and reasons else reasons
            if isinstance(reason, dict):  # a bulk item: {"messages": {"3": {"payload": [...]}}}
                return f"{name}: {_detail(reason)}"
            return f"{name}: {reason}"
    if isinstance(body, list) and body:
        return str(body[0])
    return str(body)[:500] if body else ""


def raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except ValueError:
        body = response.text[:2000]
    cls = errors.error_for(response.status_code)
    detail = _detail(body) or response.reason_phrase
    kwargs = {"status": response.status_code, "body": body, "request_id": response.headers.get("x-request-id")}
    if cls is errors.RateLimited:
        raise cls(detail, retry_after=retry_after_seconds(response.headers.get("retry-after")), **kwargs)
    raise cls(detail, **kwargs)


def result(call: Call, response: httpx.Response):
    raise_for(response)
    data = response.json() if response.content else None
    return call.parse(data, response.status_code) if call.parse else data


def _retryable(exc: BaseException, policy: Retry) -> bool:
    return isinstance(exc, errors.TransportError) or isinstance(exc, errors.APIError) and exc.status in policy.statuses


class Base:
    """What both clients share: the base URL, the key, the policy, and how a page's ``next`` link
    is checked (the key is never sent to another origin)."""

    def __init__(self, base_url: str, key: str, *, timeout: float | httpx.Timeout | None = None,
                 retry: Retry | None = None, headers: dict | None = None):
        if not base_url or urlsplit(base_url).scheme not in ("http", "https"):
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        if not key:
            raise ValueError("key is required: an API key of your team (Authorization: Bearer)")
        self.base_url = base_url.rstrip("/")
        self.retry = retry or Retry()
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else (
            DEFAULT_TIMEOUT if timeout is None else httpx.Timeout(timeout))
        self.headers = {"Authorization": f"Bearer {key}", "User-Agent": USER_AGENT, "Accept": "application/json",
                        **(headers or {})}

    def url(self, path: str) -> str:
        if path.startswith(("http://", "https://")):
            here, there = urlsplit(self.base_url), urlsplit(path)
            if (here.scheme, here.netloc) != (there.scheme, there.netloc):
                raise errors.DelayError(f"refusing to follow a link to another origin: {path}")
            return path
        return self.base_url + path

    def policy(self, call: Call) -> Retry:
        return self.retry if call.idempotent else NO_RETRY

    def arguments(self, call: Call, attempt: int) -> dict:
        """The request of try ``attempt`` (a retry sends ``retried_json`` where the call has one)."""
        body = call.retried_json if attempt > 1 and call.retried_json is not None else call.json
        return {"method": call.method, "url": self.url(call.path), "params": call.query(), "json": body,
                "headers": {**self.headers, **call.headers} if call.headers else self.headers}

    @staticmethod
    def unreachable(call: Call, exc: httpx.TransportError) -> errors.TransportError:
        return errors.TransportError(f"{call.method} {call.path}: {exc!r}")

    def retry_wait(self, call: Call, attempt: int, exc: errors.DelayError) -> float | None:
        """Seconds to wait before trying ``call`` again after ``exc``; None: raise it."""
        policy = self.policy(call)
        if attempt >= policy.attempts or not _retryable(exc, policy):
            return None
        return policy.wait(attempt, getattr(exc, "retry_after", None))


class SyncTransport(Base):
    def __init__(self, base_url: str, key: str, *, http: httpx.Client | None = None, **kwargs):
        super().__init__(base_url, key, **kwargs)
        self.http = http or httpx.Client(timeout=self.timeout, follow_redirects=False, trust_env=True)

    def send(self, call: Call):
        for attempt in itertools.count(1):
            try:
                try:
                    response = self.http.request(**self.arguments(call, attempt))
                except httpx.TransportError as exc:
                    raise self.unreachable(call, exc) from exc
                return result(call, response)
            except errors.DelayError as exc:
                wait = self.retry_wait(call, attempt, exc)
                if wait is None:
                    raise
                time.sleep(wait)

    def close(self) -> None:
        self.http.close()


class AsyncTransport(Base):
    def __init__(self, base_url: str, key: str, *, http: httpx.AsyncClient | None = None, **kwargs):
        super().__init__(base_url, key, **kwargs)
        self.http = http or httpx.AsyncClient(timeout=self.timeout, follow_redirects=False, trust_env=True)

    async def send(self, call: Call):
        for attempt in itertools.count(1):
            try:
                try:
                    response = await self.http.request(**self.arguments(call, attempt))
                except httpx.TransportError as exc:
                    raise self.unreachable(call, exc) from exc
                return result(call, response)
            except errors.DelayError as exc:
                wait = self.retry_wait(call, attempt, exc)
                if wait is None:
                    raise
                await asyncio.sleep(wait)

    async def aclose(self) -> None:
        await self.http.aclose()

"""The webhook engine: every webhook call of a worker on one asyncio event loop (aiohttp), in a
thread of its own beside the delivery loop, which takes the rows before and records the results
after (delivery/webhook_calls.py): no call runs inside a database transaction.

Why: a thread per call under requests costs ~2 ms of Python a call under one interpreter lock and
makes 163 calls/s; eight threads shared by every endpoint let one slow receiver hold all of them.

What a call may cost is bounded: one deadline over the whole call (resolve, connect, send, read),
the answer read up to a cap (longer fails the attempt as ``too_large``), at most two of the
target's addresses tried. The SSRF guard stays where it is strong: the resolver checks every
address the name has (guards.checked_addresses) and the connection goes to a checked address,
never resolved again; connections are kept per set of allowed networks, so a connection opened
under one team's grant is never reused for a team without it. No proxy from the environment,
no redirects followed.

Fairness (fairness.py): calls wait per endpoint and start in round robin over teams, then
endpoints, each endpoint bounded by its bulkhead; the loop hands over no more than an endpoint's
bulkhead, so a receiver that never answers holds its own slots and no one else's.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver

from scheduling.delivery.fairness import FairQueue
from scheduling.models import AttemptOutcome
from scheduling.security import guards

log = logging.getLogger(__name__)

MAX_ADDRESSES = 2  # of a name's addresses, the ones a call tries
DNS_CACHE_SECONDS = 60  # a name is resolved and checked again at least this often


@dataclass
class Call:
    """One webhook call, built by the delivery loop from the row it took."""

    message_id: str
    endpoint: Hashable
    team: Hashable
    url: str
    body: bytes
    headers: dict[str, str]
    deadline_s: float
    networks: tuple  # what the team may reach besides public addresses
    limit: int  # the endpoint's bulkhead in this worker
    token: object = None  # the caller's, handed back untouched (the delivery loop's: webhook_calls.CallToken)


@dataclass
class CallResult:
    call: Call
    started_at: float  # epoch seconds
    duration_ms: int = 0
    outcome: str = AttemptOutcome.OK
    status_code: int | None = None
    excerpt: str = ""
    retry_after: str | None = None  # the header, when a 429 or 503 sent one
    called: bool = True  # False: handed back unattempted (its endpoint paused, the engine stopping)

    @property
    def ok(self) -> bool:
        return self.called and self.outcome == AttemptOutcome.OK


class TooLarge(Exception):
    pass


class _CheckedResolver(AbstractResolver):
    """Resolves with the guard: every address of the name allowed, or TargetRefused; the first
    MAX_ADDRESSES are returned, and aiohttp connects to those addresses, by number."""

    def __init__(self, networks: tuple):
        self.networks = networks

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
        addresses = await asyncio.get_running_loop().run_in_executor(
            None, guards.checked_addresses, host, port, self.networks)
        return [{"hostname": host, "host": address, "port": port,
                 "family": socket.AF_INET6 if ":" in address else socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST} for address in addresses[:MAX_ADDRESSES]]

    async def close(self) -> None:
        pass


def _check_literal(url: str, networks: tuple) -> None:
    """aiohttp connects to an address written in the URL without asking the resolver: the guard
    checks it here (a name goes through _CheckedResolver)."""
    why = _literal_refusal(urlsplit(url).hostname or "", networks)
    if why:
        raise guards.TargetRefused(why)


@functools.lru_cache(maxsize=4096)
def _literal_refusal(host: str, networks: tuple) -> str | None:
    """Why ``host``, when it is an IP address, may not be called; a pure function of its
    arguments, remembered: computed each time, it is a tenth of the engine's CPU per call."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    why = guards.address_refusal(host, networks)
    return f"webhook target {host} is {why}" if why else None


def classify(exc: BaseException) -> str:
    """The attempt's outcome for a call that raised."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return AttemptOutcome.TIMEOUT
    if isinstance(exc, TooLarge):
        return AttemptOutcome.TOO_LARGE
    if isinstance(exc, guards.TargetRefused):
        return AttemptOutcome.GUARD
    if isinstance(exc, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError, ssl.SSLError)):
        return AttemptOutcome.TLS
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(exc, socket.gaierror) or (
            isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, socket.gaierror)):
        return AttemptOutcome.DNS
    if isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
                        ConnectionError)):
        return AttemptOutcome.REFUSED
    return AttemptOutcome.ERROR


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "deadline passed"
    return f"{type(exc).__name__}: {exc}"


@dataclass
class _Paused:
    until: float  # time.monotonic()
    probing: bool = False


@dataclass
class EngineSettings:
    concurrency: int
    response_max_bytes: int
    excerpt_bytes: int


class WebhookEngine:
    """Calls handed over by ``submit`` (from any thread) run on the engine's event loop; each
    result goes to ``on_done`` (called on the engine's thread: it must only hand it over)."""

    def __init__(self, settings: EngineSettings, on_done: Callable[[CallResult], None]):
        self.settings = settings
        self.on_done = on_done
        self.queue = FairQueue()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="dp-webhooks", daemon=True)
        self.sessions: dict[tuple, aiohttp.ClientSession] = {}
        self.running = 0
        self.stopping = False
        self.paused: dict[Hashable, _Paused] = {}
        self._counts_lock = threading.Lock()
        self._queued: dict[Hashable, int] = {}  # per endpoint: submitted, not yet done (read by the loop's thread)

    # --- the loop's side (any thread) ----------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5) -> None:
        """Waiting calls come back unattempted; calls under way finish first (for up to
        ``timeout``): the receiver may have one already, and a call cut off would be recorded as
        failed and made again (a warm shutdown, replacing a worker, calls nothing twice)."""
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self._shutdown, time.monotonic() + timeout)
            self.thread.join(timeout + 1)

    def submit(self, calls: list[Call]) -> None:
        with self._counts_lock:
            for call in calls:
                self._queued[call.endpoint] = self._queued.get(call.endpoint, 0) + 1
        self.loop.call_soon_threadsafe(self._enqueue, calls)

    def room(self, endpoint: Hashable, limit: int) -> int:
        """How many more calls ``endpoint`` may have handed over now (its bulkhead less what it has)."""
        with self._counts_lock:
            return max(0, limit - self._queued.get(endpoint, 0))

    def in_flight(self) -> int:
        with self._counts_lock:
            return sum(self._queued.values())

    def pause(self, endpoint: Hashable, seconds: float) -> None:
        """No call of ``endpoint`` starts for ``seconds`` (then one probe, until its result);
        its waiting calls come back unattempted."""
        self.loop.call_soon_threadsafe(self._pause, endpoint, seconds)

    # --- the engine's thread -------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.run_until_complete(self._close_sessions())
        self.loop.close()

    def _shutdown(self, until: float) -> None:
        self.stopping = True  # no call starts any more (a finished one starts none)
        for item in self.queue.take_all():
            self._finish(CallResult(item, time.time(), called=False))
        if self.running and time.monotonic() < until:
            self.loop.call_later(0.01, self._shutdown, until)
        else:
            self.loop.stop()  # what is still under way now is cut off (closing the sessions)

    async def _close_sessions(self) -> None:
        for session in self.sessions.values():
            await session.close()

    def _enqueue(self, calls: list[Call]) -> None:
        for call in calls:
            paused = self.paused.get(call.endpoint)
            if paused is not None and paused.until > time.monotonic():
                self._finish(CallResult(call, time.time(), called=False))
                continue
            self.queue.push(call.endpoint, call.team, call, limit=1 if paused is not None else call.limit)
        self._start_some()

    def _pause(self, endpoint: Hashable, seconds: float) -> None:
        self.paused[endpoint] = _Paused(time.monotonic() + seconds)
        for call in self.queue.set_paused(endpoint, True):
            self._finish(CallResult(call, time.time(), called=False))
        self.loop.call_later(seconds, self._half_open, endpoint)

    def _half_open(self, endpoint: Hashable) -> None:
        """The pause is over: one call (a probe) until its result says whether to close or reopen."""
        paused = self.paused.get(endpoint)
        if paused is None or paused.until > time.monotonic() + 0.001:
            return
        paused.probing = True
        self.queue.set_paused(endpoint, False)
        self._start_some()

    def _start_some(self) -> None:
        while self.running < self.settings.concurrency and not self.stopping:
            call = self.queue.pop()
            if call is None:
                return
            paused = self.paused.get(call.endpoint)
            if paused is not None and paused.probing and self.queue.running(call.endpoint) > 1:
                # a probe is out: the others wait for its answer
                self.queue.done(call.endpoint)
                self._finish(CallResult(call, time.time(), called=False))
                continue
            self.running += 1
            self.loop.create_task(self._call(call))

    async def _call(self, call: Call) -> None:
        result = CallResult(call, time.time())
        started = time.monotonic()
        try:
            async with asyncio.timeout(call.deadline_s):
                await self._post(call, result)
        except Exception as exc:  # every failure is the attempt's outcome, never the engine's
            result.outcome = classify(exc)
            result.excerpt = result.excerpt or _describe(exc)[: self.settings.excerpt_bytes]
        result.duration_ms = int((time.monotonic() - started) * 1000)
        self.running -= 1
        self.queue.done(call.endpoint)
        self._after(call, result)
        self._finish(result)
        self._start_some()

    async def _post(self, call: Call, result: CallResult) -> None:
        _check_literal(call.url, call.networks)
        session = self._session(call.networks)
        async with session.post(call.url, data=call.body, headers=call.headers, allow_redirects=False) as response:
            result.status_code = response.status
            if response.status in (429, 503):
                result.retry_after = response.headers.get("Retry-After")
            answer = await self._read_capped(response)
            result.excerpt = answer[: self.settings.excerpt_bytes].decode("utf-8", "replace")
            if not 200 <= response.status < 300:
                result.outcome = AttemptOutcome.HTTP_STATUS

    async def _read_capped(self, response: aiohttp.ClientResponse) -> bytes:
        cap, chunks, size = self.settings.response_max_bytes, [], 0
        while chunk := await response.content.readany():
            size += len(chunk)
            if size > cap:
                response.close()  # the rest is never read: the connection goes
                raise TooLarge(f"answer over {cap} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def _session(self, networks: tuple) -> aiohttp.ClientSession:
        session = self.sessions.get(networks)
        if session is None:
            connector = aiohttp.TCPConnector(resolver=_CheckedResolver(networks), limit=0, limit_per_host=0,
                                             ttl_dns_cache=DNS_CACHE_SECONDS, enable_cleanup_closed=True)
            # no timer of aiohttp's own per request: the call's deadline (asyncio.timeout) is the one
            session = aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=True,
                                            timeout=aiohttp.ClientTimeout(total=None),
                                            skip_auto_headers=("User-Agent",),
                                            headers={"User-Agent": "delay-platform-webhooks"})
            self.sessions[networks] = session
        return session

    def _after(self, call: Call, result: CallResult) -> None:
        """A probe's answer closes the circuit (or the pause ends for good)."""
        paused = self.paused.get(call.endpoint)
        if paused is not None and paused.probing and result.ok:
            del self.paused[call.endpoint]

    def _finish(self, result: CallResult) -> None:
        with self._counts_lock:
            left = self._queued.get(result.call.endpoint, 0) - 1
            if left > 0:
                self._queued[result.call.endpoint] = left
            else:
                self._queued.pop(result.call.endpoint, None)
        try:
            self.on_done(result)
        except Exception:
            log.exception("webhook result of %s not handed over", result.call.message_id)


"""Group commit for publishers: one thread per process publishes what many threads hand it.

Each caller hands over an item (:meth:`Gatherer.run`) and waits for it to be done. The thread
takes every item waiting and passes them to ``send`` in one call, so the rows of concurrent API
requests leave in one confirmed batch (and fill envelopes together) on one connection and channel.

When the thread is idle, an item goes at once: a request that finds nobody else adds no wait (one
hand-over between threads, ~20 µs). Items that arrive while a batch is being published wait for
the next one; and then, since more are evidently coming, the thread lets the oldest of them wait
up to ``gather_ms`` for others, while another caller has said it is about to hand one over
(:meth:`Gatherer.expect`: a request between writing its rows and its commit), and until ``enough``
of them (by their ``weight``) are waiting. Nothing expected: the batch goes without waiting.

Fork-safe: the thread, its queue and its lock belong to the process that made them. A forked child
(gunicorn's workers, Celery's pool) starts its own on first use; nothing of the parent's is touched.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Handed:
    """An item handed to the gatherer, and what became of it."""

    item: object
    weight: int
    arrived: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    abandoned: bool = False  # its caller stopped waiting: not sent if not sent yet


# An expectation not met by then is forgotten (its transaction rolled back, or is still open).
EXPECTED_FOR = 1.0


class GatherTimeout(Exception):
    """The gatherer did not finish an item in time (what became of it is unknown)."""


class Gatherer:
    """``send(items)`` is called in the gatherer's thread with the items of one batch, in the order
    they arrived; it records each item's outcome on the item itself (an exception it raises is
    raised to every caller of the batch). ``gather_ms`` and ``enough`` are read per batch."""

    def __init__(self, send: Callable[[list], None], *, gather_ms: Callable[[], float],
                 enough: Callable[[], int], name: str = "publisher"):
        self.send, self.gather_ms, self.enough, self.name = send, gather_ms, enough, name
        self._start()
        ref = weakref.ref(self)  # a child forked while another thread held the lock starts afresh
        os.register_at_fork(after_in_child=lambda: (g := ref()) is not None and g._start())

    def _start(self) -> None:
        self.pid = os.getpid()
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[Handed] = []
        self._busy_before = False  # items came while the last batch was sent
        self._expected: dict[int, float] = {}  # token -> until when (monotonic) its item is expected
        self._tokens = itertools.count(1)
        self._thread: threading.Thread | None = None
        self.batches = 0  # batches sent (what tests and the bench read)
        self.items = 0

    @property
    def thread_name(self) -> str:
        return f"dp-{self.name}-{os.getpid()}"

    def _ensure(self) -> None:
        """Called with the lock held."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
            self._thread.start()

    def expect(self) -> int:
        """Say an item is coming (within ms: its caller is committing the rows it will hand over); a
        token for :meth:`run`. Under load, a batch waits for expected items (up to ``gather_ms``)."""
        if self.pid != os.getpid():
            self._start()
        with self._cond:
            token = next(self._tokens)
            self._expected[token] = time.monotonic() + EXPECTED_FOR
            return token

    def forget(self, token: int | None) -> None:
        """The expected item will not come (its transaction rolled back)."""
        with self._cond:
            self._expected.pop(token, None)

    def run(self, item, *, weight: int = 1, timeout: float = 120.0, token: int | None = None):
        """Hand ``item`` over and wait until it is sent; raises what ``send`` raised, or
        GatherTimeout after ``timeout`` seconds (the item is then not sent if it was not yet).
        ``token``: what :meth:`expect` gave for it."""
        handed = Handed(item, weight)
        if self.pid != os.getpid():  # forked without the at-fork hook having run (it always runs on POSIX)
            self._start()
        with self._cond:
            self._ensure()
            self._expected.pop(token, None)
            self._queue.append(handed)
            self._cond.notify()
        if not handed.done.wait(timeout):
            with self._cond:
                handed.abandoned = True
            if not handed.done.is_set():
                raise GatherTimeout(f"{self.name} did not publish within {timeout:g} s")
        if handed.error is not None:
            raise handed.error
        return item

    def _take(self) -> list[Handed]:
        """Wait for items; return a batch of them (called with the lock held)."""
        while not self._queue:
            self._cond.wait()
        if self._busy_before:  # they came while the last batch was sent: more are coming
            deadline = self._queue[0].arrived + self.gather_ms() / 1000
            enough = self.enough()
            while sum(h.weight for h in self._queue) < enough and self._expecting():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
        batch, self._queue = [h for h in self._queue if not h.abandoned], []
        return batch

    def _expecting(self) -> bool:
        """Whether an item is still expected (called with the lock held)."""
        if self._expected:
            now = time.monotonic()
            for token in [t for t, until in self._expected.items() if until <= now]:
                del self._expected[token]
        return bool(self._expected)

    def _loop(self) -> None:
        while True:
            with self._cond:
                batch = self._take()
            try:
                if batch:
                    self.send([h.item for h in batch])
            except BaseException as exc:  # every caller of the batch learns it; the thread goes on
                log.exception("%s: a batch failed", self.name)
                for h in batch:
                    h.error = exc
            finally:
                self.batches += 1
                self.items += len(batch)
                for h in batch:
                    h.done.set()
                with self._cond:
                    self._busy_before = bool(self._queue)

"""The delivery loop's writer: ended webhook calls recorded on a thread (and a database
connection) of its own, so the loop takes and hands over the next calls while PostgreSQL writes
the last ones.

Why: with the recording on the loop's thread, one endpoint's calls would go round take → call →
record → take, two thirds of each turn waiting for PostgreSQL, and its bulkhead's calls would be
all it could make per turn (~1,800 calls/s). Here a turn's recording overlaps the next turn's calls.

What stays on the loop's thread: everything that touches the broker (acks, retries published)
and the loop's own state; this thread only writes and hands back what it wrote (``done``).
Results the database is away for wait here, in order, and are written when it is back (their rows
keep their lease meanwhile); a result it refuses is written alone, and one still refused comes
back unrecorded: the loop holds its message until its lease has passed, then calls again.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field

from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections

from scheduling.core import backoff
from scheduling.delivery.webhook_calls import Recorded, webhook_call_record
from scheduling.delivery.webhooks import CallResult

log = logging.getLogger(__name__)
IDLE_WAIT_SECONDS = 0.1  # how often an idle recorder looks whether it is stopping


@dataclass
class Written:
    """What one write did: its results, what the loop does with them, those not recorded."""

    results: list[CallResult]
    recorded: Recorded
    unrecorded: list[CallResult] = field(default_factory=list)


class Recorder(threading.Thread):
    def __init__(self, by: str):
        super().__init__(name="dp-webhook-recorder", daemon=True)
        self.by = by
        self.inbox: queue.SimpleQueue[list[CallResult]] = queue.SimpleQueue()
        self.done: queue.SimpleQueue[Written] = queue.SimpleQueue()
        self.stopping = threading.Event()
        self._waiting: list[CallResult] = []  # taken from the inbox, not written yet
        self._outages = 0

    def submit(self, results: list[CallResult]) -> None:
        if results:
            self.inbox.put(results)

    def stop(self, timeout: float = 10) -> None:
        """Write what was handed over (its messages are then duplicates when the broker hands them
        back, not called again), then end."""
        self.stopping.set()
        self.join(timeout)

    def run(self) -> None:
        try:
            while not (self.stopping.is_set() and self.inbox.empty()):
                self._take(block=not self._waiting)
                if self._waiting and not self._write():
                    if self.stopping.is_set():
                        return  # the database is away: the leases pass, the calls are made again
                    self._outages += 1
                    self.stopping.wait(backoff.database(self._outages))
        finally:
            close_old_connections()

    def _take(self, block: bool) -> None:
        try:
            if block:
                self._waiting.extend(self.inbox.get(timeout=IDLE_WAIT_SECONDS))
            while True:
                self._waiting.extend(self.inbox.get_nowait())
        except queue.Empty:
            pass

    def _write(self) -> bool:
        """Write the waiting results in one transaction; False when the database is away."""
        results = self._waiting
        try:
            recorded = webhook_call_record(results=[(r, r.call.token.row) for r in results], by=self.by)
        except (OperationalError, InterfaceError) as exc:  # the rows keep their lease; the results wait
            close_old_connections()
            log.warning("%d webhook result(s) not recorded yet: database unavailable (%s)", len(results), exc)
            return False
        except DatabaseError:  # one the database refuses must not hold up the others
            log.exception("recording %d webhook result(s) failed; recording them one by one", len(results))
            written = self._one_by_one(results)
        else:
            written = Written(results, recorded)
        self._waiting, self._outages = [], 0
        self.done.put(written)
        return True

    def _one_by_one(self, results: list[CallResult]) -> Written:
        merged, kept, refused = Recorded({}, {}, []), [], []
        for result in results:
            try:
                one = webhook_call_record(results=[(result, result.call.token.row)], by=self.by)
            except DatabaseError as exc:
                log.error("webhook result of %s not recorded (%s); it is called again after its lease",
                          result.call.message_id, exc)
                refused.append(result)
                continue
            merged.outcomes.update(one.outcomes)
            merged.paused.update(one.paused)
            merged.disabled += one.disabled
            kept.append(result)
        return Written(kept, merged, refused)

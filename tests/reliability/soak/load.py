"""The soak's steady load, through the HTTP API as a client sends it: bulk requests
(POST /api/messages/bulk/ with delay_seconds) paced to a rate, and a share of the messages
cancelled one by one (POST /api/messages/{id}/cancel/) at a random moment before they are due
or just after, so some cancels race the delivery and are answered 409."""

from __future__ import annotations

import heapq
import random
import threading
import time

import requests

from tests.reliability.soak.ledger import Ledger
from tests.reliability.soak.rules import Plan

TICK_S = 0.2  # a bulk request every 200 ms: 60 messages at 300/s
BULK_MAX = 1000  # DELAY_BULK_MAX: a request behind schedule catches up at most this much
CANCEL_THREADS = 4  # two web workers serve them; more threads keep both busy
TIMEOUT_S = 120  # a request slower than this is counted as an error (its messages may exist, unknown)


class Load:
    def __init__(self, plan: Plan, url: str, key: str, endpoints: list[str], ledger: Ledger, seed: int = 7):
        self.plan, self.url, self.endpoints, self.ledger = plan, url, endpoints, ledger
        self.headers = {"Authorization": f"Bearer {key}"}
        self.rng = random.Random(seed)
        self.errors: dict[str, int] = {}
        self.first_errors: list[str] = []
        self._stop_scheduling = threading.Event()
        self._stop = threading.Event()
        self._cancels: list[tuple[float, str]] = []
        self._cancels_cv = threading.Condition()
        self._threads: list[threading.Thread] = []
        self.started = self.stopped = None
        self.cancel_lag_s: list[float] = []  # how late each cancel went out after its planned moment

    def start(self) -> None:
        self.started = time.monotonic()
        self._threads = [threading.Thread(target=self._schedule, name="soak-bulk", daemon=True)]
        self._threads += [threading.Thread(target=self._cancel, name=f"soak-cancel-{i}", daemon=True)
                          for i in range(CANCEL_THREADS)]
        for thread in self._threads:
            thread.start()

    def stop_scheduling(self) -> None:
        """No new messages; cancels already planned still go out (they may race a delivery)."""
        self._stop_scheduling.set()
        self._threads[0].join(TIMEOUT_S + 5)
        self.stopped = time.monotonic()

    def cancels_waiting(self) -> int:
        with self._cancels_cv:
            return len(self._cancels)

    def stop(self) -> None:
        self._stop_scheduling.set()
        self._stop.set()
        with self._cancels_cv:
            self._cancels_cv.notify_all()
        for thread in self._threads:
            thread.join(TIMEOUT_S + 5)

    def achieved_rate(self) -> float:
        end = self.stopped or time.monotonic()
        return self.ledger.scheduled / max(1e-9, end - self.started)

    def _error(self, what: str, detail: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1
        if len(self.first_errors) < 5:
            self.first_errors.append(f"{what}: {detail[:300]}")

    def _schedule(self) -> None:
        session = requests.Session()
        session.headers.update(self.headers)
        sent, seq, next_at = 0, 0, self.started
        while not self._stop_scheduling.is_set():
            next_at += TICK_S
            wait = next_at - time.monotonic()
            if wait > 0 and self._stop_scheduling.wait(wait):
                break
            due = int(self.plan.rate * (time.monotonic() - self.started)) - sent
            n = min(max(due, 0), BULK_MAX)
            if not n:
                continue
            delays = [round(self.rng.uniform(self.plan.min_delay_s, self.plan.max_delay_s), 3) for _ in range(n)]
            body = {"messages": [{"endpoint": self.endpoints[(seq + i) % len(self.endpoints)], "payload": {"n": seq + i},
                                  "delay_seconds": d} for i, d in enumerate(delays)]}
            seq += n
            sent += n  # attempted: a failed request is not retried (it would double the rate after an outage)
            try:
                response = session.post(self.url + "/api/messages/bulk/", json=body, timeout=TIMEOUT_S)
            except requests.RequestException as exc:
                self._error("bulk: no answer", repr(exc))
                continue
            if response.status_code != 201:
                self._error(f"bulk: {response.status_code}", response.text)
                continue
            ids = [m["id"] for m in response.json()["messages"]]
            self.ledger.accepted(ids)
            now = time.monotonic()
            planned = [(now + self.rng.uniform(0.1, d + 1.0), i) for i, d in zip(ids, delays)
                       if self.rng.random() < self.plan.cancel_share]
            if planned:
                with self._cancels_cv:
                    for item in planned:
                        heapq.heappush(self._cancels, item)
                    self._cancels_cv.notify_all()

    def _cancel(self) -> None:
        session = requests.Session()
        session.headers.update(self.headers)
        while not self._stop.is_set():
            with self._cancels_cv:
                if not self._cancels:
                    self._cancels_cv.wait(0.5)
                    continue
                at, message_id = self._cancels[0]
                if at > time.monotonic():
                    self._cancels_cv.wait(min(0.5, at - time.monotonic()))
                    continue
                heapq.heappop(self._cancels)
            self.cancel_lag_s.append(time.monotonic() - at)
            try:
                response = session.post(f"{self.url}/api/messages/{message_id}/cancel/", timeout=TIMEOUT_S)
            except requests.RequestException as exc:
                self._error("cancel: no answer", repr(exc))
                self.ledger.cancel_answered(message_id, "no answer")
                continue
            if response.status_code not in (200, 404, 409):
                self._error(f"cancel: {response.status_code}", response.text)
            self.ledger.cancel_answered(message_id, response.status_code)

"""API traffic through an upgrade: one thread making requests one after the other, with a person's
key (``token``: create_api_key --user) and a team's key, reads and writes, counting each answer by
phase, by the web that answered and by credential. It schedules messages as it goes (their ids are
kept: each must arrive too)."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter

import requests


class Traffic(threading.Thread):
    def __init__(self, *, url: str, web: str, token: str, team_key: str, endpoint: str, schedule: str):
        super().__init__(daemon=True)
        self.url, self.web, self.phase = url, web, "before"
        self.credentials = {"token": f"Bearer {token}", "team key": f"Bearer {team_key}"}
        self.endpoint, self.schedule = endpoint, schedule
        self.answers: Counter = Counter()  # (phase, web, credential, status) -> requests
        self.failures: list[str] = []  # what each non-2xx answer or error was
        self.scheduled: list[str] = []  # ids of the messages it scheduled
        self._halt, self._lock = threading.Event(), threading.Lock()

    def point_at(self, url: str, web: str) -> None:
        """The next request goes to ``url`` (a request under way finishes where it went)."""
        with self._lock:
            self.url, self.web = url, web

    def requests_made(self, phase: str | None = None, web: str | None = None, credential: str | None = None,
                      ok: bool | None = None) -> int:
        with self._lock:
            return sum(n for (p, w, c, s), n in self.answers.items() if phase in (None, p) and web in (None, w)
                       and credential in (None, c) and (ok is None or (200 <= s < 300) == ok))

    def stop(self) -> None:
        self._halt.set()
        self.join(60)

    def run(self) -> None:
        session = requests.Session()
        calls = itertools.cycle([
            ("token", "GET", f"/api/messages/?endpoint={self.endpoint}&limit=5", None),
            ("team key", "POST", "/api/messages/", "message"),
            ("team key", "GET", f"/api/endpoints/{self.endpoint}/", None),
            ("token", "GET", f"/api/schedules/{self.schedule}/", None),
            ("team key", "GET", "/api/", None),
            ("token", "POST", "/api/messages/", "message"),
        ])
        number = 0
        while not self._halt.is_set():
            credential, method, path, body = next(calls)
            with self._lock:
                url, web, phase = self.url, self.web, self.phase
            number += 1
            json = {"endpoint": self.endpoint, "payload": {"traffic": number},
                    "delay_seconds": 1 + number % 4} if body else None
            try:
                answer = session.request(method, url + path, json=json, timeout=30,
                                         headers={"Authorization": self.credentials[credential]})
                status = answer.status_code
                if status == 201 and body:
                    self.scheduled.append(answer.json()["id"])
                elif not 200 <= status < 300:
                    said = " ".join(answer.text.split())[:120]
                    self.failures.append(f"{phase} {web} {credential} {method} {path}: {status} {said}")
            except requests.RequestException as exc:
                status = 0
                self.failures.append(f"{phase} {web} {credential} {method} {path}: {exc}")
            with self._lock:
                self.answers[(phase, web, credential, status)] += 1
            time.sleep(0.02)

"""Polling for a condition with a deadline: what every test and benchmark does while a worker,
a broker or a web server catches up, and the message it fails with when it does not."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float, interval: float = 0.1, message: str = "condition"):
    """Poll until predicate() is truthy; return its value or fail with the message."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)

"""Case 1, lateness at idle: messages of 1-30 s sent a few at a time with nothing else running, on
each version, then the same through a hand-written kombu publisher into the same cascade (the
broker's floor) and through Celery's native delayed delivery. The figure is how late a message
arrives when the platform is not busy (p99), and that none arrives early."""

from __future__ import annotations

import time

from bench.cases.burst import raw_floor
from bench.measure import percentiles
from harness.waiting import wait_until


def idle_delays(b, n: int, ticks: int) -> list[list[float]]:
    return [[round(b.rng.uniform(1, 30), 3) for _ in range(n // ticks)] for _ in range(ticks)]


def run(b, native: bool = True) -> dict:
    """2,000 messages of 1-30 s sent over 5 s, for each version alone, then the raw floor the same
    way (whole seconds), then 2,000 Celery native countdown tasks: nothing else runs meanwhile."""
    n, ticks = (500 if b.quick else 2000), 20
    result = {}
    for version in b.versions:
        endpoint = b.endpoint("idle", version)
        for delays in idle_delays(b, n, ticks):
            b.schedule(endpoint, delays, clients=1)
            time.sleep(0.25)
        wait_until(lambda: b.count(endpoint, "delivered") >= n, 120, 0.5, f"{version} deliveries")
        late = b.lateness(endpoint)
        result[version] = {**percentiles(late), "early": sum(x < 0 for x in late)}
        raw = raw_floor(b, version, [[b.rng.randint(1, 30) for _ in range(n // ticks)] for _ in range(ticks)], 0.25)
        result[f"raw_{version}"] = {**percentiles(raw), "early": sum(x < 0 for x in raw), "count": len(raw)}
    if not native:
        return result
    with b.native_celery():
        ids = []
        for delays in idle_delays(b, n, ticks):
            ids += b.send_native(delays)[0]
            time.sleep(0.25)
        wait_until(lambda: len(b.celery_lateness(ids)) >= n, 180, 0.5, "Celery native tasks")
    late = b.celery_lateness(ids)
    result["native"] = {**percentiles(late), "early": sum(x < 0 for x in late)}
    return result

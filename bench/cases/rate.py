"""Case 3, the scheduling rate: how many messages a second go from the bulk API to a durable row
the broker has confirmed; against the raw publisher with confirms, Celery native and a stock
Celery ``apply_async(countdown=…)``."""

from __future__ import annotations

import time
import uuid

from bench.cases.base import now_ms
from harness.waiting import wait_until


def run(b) -> dict:
    """Bulk API -> durable row -> broker-confirmed (rows marked published), per version; the
    raw publisher with confirms into the same cascade; Celery's producers."""
    n = 5000 if b.quick else 20000
    from rabbit import Outgoing
    from scheduling.config.conf import broker
    from topology import cascade

    result = {}
    for version in b.versions:
        endpoint = b.endpoint("rate", version)
        bodies = b.bodies(endpoint, [3600.0] * n)
        started = time.perf_counter()
        b.post(bodies)
        wait_until(lambda: b.count(endpoint, "published") >= n, 300, 0.05, "rows published")
        result[version] = n / (time.perf_counter() - started)
        v = cascade.get_version(version)
        with broker().session() as session:
            r = cascade.route(v, 3600, "nobody-raw")
            out = [Outgoing(r.exchange, r.routing_key, b"x" * 200, {"x-dp-due-at-ms": now_ms(), **r.headers},
                            {"message_id": uuid.uuid4().hex}) for _ in range(n)]
            started = time.perf_counter()
            session.publish(out, window=1000)
            result[f"raw_{version}"] = n / (time.perf_counter() - started)
    native_n = n // 4  # ~240/s with confirms: a quarter keeps the case short
    _, seconds = b.send_native([3600.0] * native_n)
    result["native"] = native_n / seconds
    started = time.perf_counter()
    for _ in range(n):
        b.started_at.apply_async(kwargs={"due_ms": 0}, countdown=3600, queue="bench-sink")
    result["celery"] = n / (time.perf_counter() - started)
    return result

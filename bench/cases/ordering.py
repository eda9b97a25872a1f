"""Case 10, ordering keys (issue 49): the same burst to record-only endpoints, all due at one moment,
without a key, with many keys (2 messages each) and with 1 key (sequential), in one run: throughput
(due -> last delivered), lateness p50/p99 (the wait for the key's turn included) and the share of
messages that waited for their turn (each such one was woken and published again). Messages without
a key take the same statements as before keys existed; a keyed one whose copy comes before its turn
is set waiting and woken by the end of the one before it."""

from __future__ import annotations

import json
import time

from bench.measure import percentiles
from harness.waiting import wait_until


def _bodies(endpoint: str, due: list[float], keys: list[str | None]) -> list[bytes]:
    def at(epoch: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch * 1000) % 1000:03d}Z"

    return [json.dumps({"messages": [
        {"endpoint": endpoint, "payload": {"n": i + j}, "deliver_at": at(d),
         **({"ordering_key": keys[i + j]} if keys[i + j] is not None else {})}
        for j, d in enumerate(due[i:i + 1000])]}).encode() for i in range(0, len(due), 1000)]


def _one(b, version: str, n: int, key_of, **endpoint_fields) -> dict:
    endpoint = b.endpoint("ordering", version, **endpoint_fields)
    # all due at the same moment, after the posts (~1,000 messages in 0.3-0.5 s here: 4 s and 1 s a
    # 2,000, so that the intake is over before the first is due and the figures are the hand-over's):
    # a key's next one arrives while the one before it is being handed over (the case ordering is for)
    due = [time.time() + 4 + n / 2000] * n
    keys = [key_of(i) for i in range(n)]
    bodies = _bodies(endpoint, due, keys)
    b.post(bodies)
    if time.time() > due[0]:
        print(f"  ordering: the posts ended {time.time() - due[0]:.1f} s after the due time: intake included", flush=True)
    wait_until(lambda: b.count(endpoint, "delivered") >= n, 900, 0.5, f"ordering deliveries ({endpoint})")
    (first_due, last_delivered, waited), = b.p.sql(
        "SELECT EXTRACT(EPOCH FROM min(m.due_at)), EXTRACT(EPOCH FROM max(m.delivered_at)), "
        "count(*) FILTER (WHERE m.waiting_since IS NOT NULL) FROM scheduling_scheduledmessage m "
        "JOIN scheduling_endpoint e ON e.id = m.endpoint_id WHERE e.name = %s", endpoint)
    span = float(last_delivered) - float(first_due)
    return {"messages": n, "span_s": round(span, 2), "per_s": round(n / span, 1) if span > 0 else None,
            "waited_share": round(waited / n, 3), **percentiles(b.lateness(endpoint))}


def run(b, version: str = "v3") -> dict:
    """No key, many keys x 2, and 1 key, each a burst of its own, one after the other: to a record-only
    endpoint (a key's consecutive messages of one batch all go: the hand-over ends them), then to a
    webhook endpoint whose receiver answers at once (one call of a key at a time: a key is sequential)."""
    from bench.receiver import Receiver

    n = 2000 if b.quick else 20000
    many = n // 2
    one_key = 200 if b.quick else 2000  # sequential on a webhook: tens of messages a second
    result = {
        "none no_key": _one(b, version, n, lambda i: None),
        f"none {many}_keys": _one(b, version, n, lambda i: f"k{i % many}"),
        "none 1_key": _one(b, version, one_key, lambda i: "k"),
    }
    with Receiver(processes=1) as rx:
        hook = {"handler": "webhook", "handler_target": rx.url}
        result["webhook no_key"] = _one(b, version, n, lambda i: None, **hook)
        result[f"webhook {many}_keys"] = _one(b, version, n, lambda i: f"k{i % many}", **hook)
        result["webhook 1_key"] = _one(b, version, one_key, lambda i: "k", **hook)
    for name, figures in result.items():
        print(f"  ordering {name}: {figures['messages']:,} in {figures['span_s']} s = {figures['per_s']}/s, "
              f"lateness p50 {figures.get('p50')} ms p99 {figures.get('p99')} ms, waited {figures['waited_share']:.0%}",
              flush=True)
    return result

"""Case 7, webhook throughput: 20,000 messages due at once to a webhook endpoint whose receiver is
cheap (bench/receiver.py: raw-asyncio processes sharing a port, answering 200 at once), against
the floor measured on the same receiver in the same run: a bare async client (aiohttp, and httpx:
bench/http_clients.py) making as many calls, 256 in flight, keep-alive. The figure is calls a
second from the first call to the last as the receiver counts them; also how late the calls came
(receiver's arrival minus due, and the messages table's lateness), how many came twice, and what
the receiver cost (CPU seconds per 1,000 calls, from /proc), to show it was not the limit."""

from __future__ import annotations

import time

from bench import http_clients
from bench.cpu_split import Split
from bench.measure import percentiles
from bench.receiver import Receiver, rate
from harness.waiting import wait_until

RECEIVERS = 2  # receiver processes (the machine's cores)
CONCURRENCY = 256  # the bare clients' calls in flight


def run(b, version: str = "v3") -> dict:
    n = 5000 if b.quick else 20000
    lead = 4.0 if b.quick else 6.0  # seconds from the first bulk request to the due time
    with Receiver(processes=RECEIVERS) as rx:
        floor = http_clients.compare(rx, n, CONCURRENCY)
        for line in http_clients.describe(floor):
            print(line, flush=True)
        endpoint = b.endpoint("webhooks", version, handler="webhook", handler_target=rx.url)
        rx.reset()
        due = time.time() + lead
        bodies = b.bodies_due(endpoint, [due] * n)
        cpu = rx.cpu_seconds()
        b.post(bodies)
        posted = time.time()
        time.sleep(max(0.0, due - time.time()))
        split = Split(b.p, b.p.workers[0].process.pid).start()  # the calls' CPU, by part, not the intake's
        generator = time.process_time()
        give_up = max(due, posted) + max(120.0, n / 100)  # 163 calls/s, the old engine, takes 123 s
        while rx.count() < n and time.time() < give_up:
            time.sleep(0.05)
        parts = split.stop()
        parts["bench (polling)"] = time.process_time() - generator
        arrivals = rx.arrivals()
        receiver_cpu = rx.cpu_seconds() - cpu
        cancelled = b.cancel(endpoint) if rx.count() < n else 0  # leftovers would weigh on the next case
    times = [t for t, _ in arrivals]
    first = {}
    for t, message_id in arrivals:
        first.setdefault(message_id, t)
    try:  # the rows are recorded after the calls
        wait_until(lambda: b.count(endpoint, "delivered") >= len(first), 60, 0.5, "webhook rows delivered")
    except AssertionError:
        pass  # reported below as rows_delivered
    result = {
        "messages": n, "calls": len(arrivals), "distinct": len(first), "duplicates": len(arrivals) - len(first),
        "calls_per_s": rate(times), "span_s": times[-1] - times[0] if len(times) > 1 else None,
        "posted_before_due_s": due - posted, "rows_delivered": b.count(endpoint, "delivered"), "cancelled": cancelled,
        "receiver_cpu_s": receiver_cpu, "receiver_cpu_s_per_1000": receiver_cpu * 1000 / max(1, len(arrivals)),
        "late_receiver": percentiles([(t - due) * 1000 for t in first.values()]),
        "late_db": percentiles(b.lateness(endpoint)),
        "cpu_us_per_call": {name: round(seconds * 1e6 / max(1, len(arrivals)), 1)
                            for name, seconds in {**parts, "receiver": receiver_cpu}.items()},
        "floor": floor,
    }
    late, rows = result["late_receiver"], result["late_db"]
    print(f"  platform {version}: {result['calls']:,} calls of {n:,} ({result['duplicates']} twice), "
          f"{result['calls_per_s'] or 0:,.0f} calls/s over {result['span_s'] or 0:.1f} s; "
          f"arrival p50 {late['p50'] or 0:,.0f} / p99 {late['p99'] or 0:,.0f} ms after due; "
          f"rows p99 {rows['p99'] or 0:,.0f} ms; receiver {result['receiver_cpu_s_per_1000']:.3f} CPU s per 1,000 calls"
          + ("" if due > posted else f"; the bulk requests ended {posted - due:.1f} s after the due time"),
          flush=True)
    print("  CPU µs a call: " + ", ".join(f"{name} {us:.0f}" for name, us in result["cpu_us_per_call"].items()), flush=True)
    return result

"""Case 6, delivered throughput: a steady load with delays of 1-60 s to a record-only endpoint
(handler ``none``: the delivery is recorded, nothing is called), raised per version until the
messages due in steady state miss p99 ≤ 250 ms; the highest load that kept it (target on v3 with
envelopes: 10,000/s), and the broker's CPU per message over each load's steady window."""

from __future__ import annotations

import time

from bench.broker_cpu import cpu_seconds
from bench.measure import percentiles
from harness.waiting import wait_until

# messages a second offered per version, in turn, until one misses
LOADS = {"v1": [500, 750], "v2": [500, 750, 1000], "v3": [1000, 2500, 5000, 7500, 10000, 12500]}
QUICK_LOADS = {"v1": [250], "v2": [250, 500], "v3": [500, 1000]}


def run(b) -> dict:
    """Offer a steady load with delays uniform in 1-60 s; once deliveries have reached steady
    state (after 60 s of sending) judge the messages due then: p99 lateness <= 250 ms? Loads
    rise per version until one misses; broker CPU per scheduled-and-delivered message is
    measured over each load's steady window."""
    loads, send_s = (QUICK_LOADS, 30) if b.quick else (LOADS, 70)
    results = {}
    for version in b.versions:
        levels = {}
        for load in loads[version]:
            levels[load] = _one_load(b, version, load, send_s)
            stats = levels[load]
            print(f"  {version} load {load}/s: p99 {stats['p99']:.0f} ms over {stats['judged']} messages "
                  f"due in steady state; broker {stats['broker_us_per_msg'] or 0:.0f} µs/msg", flush=True)
            if stats["p99"] > 250:
                break
        passed = [load for load, r in levels.items() if r["p99"] <= 250]
        results[version] = {"levels": levels, "highest_ok": max(passed) if passed else None}
    return results


def _one_load(b, version: str, load: int, send_s: float) -> dict:
    endpoint = b.endpoint(f"load{load}", version, handler="none")
    start, tick = time.time(), 0.5
    per_tick = max(1, int(load * tick))
    window = (min(60.0, send_s - 5), send_s)
    cpu_window = None
    while time.time() - start < send_s:
        if cpu_window is None and time.time() - start >= window[0]:
            cpu_window = (time.time(), cpu_seconds(b.broker_pid))
        b.schedule(endpoint, [round(b.rng.uniform(1, 60), 3) for _ in range(per_tick)], clients=2)
        time.sleep(max(0.0, start + (tick * (1 + int((time.time() - start) / tick))) - time.time()))
    cpu_s = cpu_seconds(b.broker_pid) - cpu_window[1]
    cpu_wall = time.time() - cpu_window[0]
    expected = b.p.sql(
        "SELECT count(*) FROM scheduling_scheduledmessage m "
        "JOIN scheduling_endpoint e ON e.id = m.endpoint_id "
        "WHERE e.name = %s AND m.due_at >= to_timestamp(%s) AND m.due_at < to_timestamp(%s)",
        endpoint, start + window[0], start + window[1])[0][0]
    wait_until(lambda: len(b.lateness(endpoint, *window, start=start)) >= expected, 120, 1)
    stats = percentiles(b.lateness(endpoint, *window, start=start))
    # in steady state the broker takes in and delivers `load` messages a second
    return {"judged": expected, **{k: round(v, 1) for k, v in stats.items()},
            "broker_us_per_msg": round(cpu_s * 1e6 / (load * cpu_wall), 1)}

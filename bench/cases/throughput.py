"""Case 6, delivered throughput: a steady load with delays of 1-60 s to a record-only endpoint
(handler ``none``: the delivery is recorded, nothing is called), raised per version until the
messages due in steady state miss p99 ≤ 250 ms or the machine cannot offer more; the highest rate
reached that kept it (target on v3 with envelopes: 10,000/s), and the CPU per message of each part
(web, worker, PostgreSQL, broker, the load generator) over each load's steady window; beside it what
PostgreSQL did a message (statements, transactions, WAL, rows written and how many updates were HOT:
bench/pg_activity.py) and, before the first load, what the broker spends with no load at all."""

from __future__ import annotations

import os
import time

from bench.broker_cpu import cpu_seconds
from bench.measure import percentiles
from bench.pg_activity import PgActivity
from harness.waiting import wait_until

# messages a second offered per version, in turn, until one misses
LOADS = {"v1": [500, 750], "v2": [500, 750, 1000], "v3": [1000, 2500, 4000, 5000, 7500, 10000, 12500]}
QUICK_LOADS = {"v1": [250], "v2": [250, 500], "v3": [500, 1000]}


def run(b) -> dict:
    """Offer a steady load with delays uniform in 1-60 s; once deliveries have reached steady
    state (after 60 s of sending) judge the messages due then: p99 lateness <= 250 ms? Loads
    rise per version until one misses, or until the load generator cannot offer the load (the
    machine is saturated: each level says what it offered and what was due and delivered in its
    window, and the CPU of each part per message, which names the saturated one). A level counts
    at the rate it reached, not the one it aimed at."""
    loads, send_s = (QUICK_LOADS, 30) if b.quick else (LOADS, 70)
    results = {"broker_idle": _broker_idle(b, 5 if b.quick else 20)}
    print(f"  broker with no load: {results['broker_idle']['core_share']:.1%} of a core "
          f"({results['broker_idle']['queues']} queues on the node)", flush=True)
    for version in b.versions:
        levels = {}
        for load in loads[version]:
            levels[load] = stats = _one_load(b, version, load, send_s)
            parts = ", ".join(f"{name.split(' ')[0]} {us:.0f}" for name, us in stats["cpu_us_per_msg"].items())
            print(f"  {version} load {load}/s: {stats['due_per_s']:,.0f}/s due in the window (sent {stats['sent_per_s']:,.0f}/s), "
                  f"p99 {stats['p99']:.0f} ms over {stats['judged']} messages; CPU µs a message: {parts}; "
                  f"machine {stats['machine_busy']:.0%} busy", flush=True)
            print(f"    {stats['postgres']['line']}", flush=True)
            for calls, statement in stats["postgres"]["top"]:
                print(f"      {calls:6.3f} a message: {statement}", flush=True)
            if stats["p99"] > 250 or stats["due_per_s"] < SHORT_OF_LOAD * load:
                break
        passed = [r["due_per_s"] for r in levels.values() if r["p99"] <= 250]
        results[version] = {"levels": levels, "highest_ok": round(max(passed)) if passed else None}
    return results


SHORT_OF_LOAD = 0.9  # a level whose window got less than this share of its load: the machine is saturated


def _one_load(b, version: str, load: int, send_s: float) -> dict:
    from bench.cpu_split import Split

    endpoint = b.endpoint(f"load{load}", version, handler="none")
    start, tick, sent = time.time(), 0.5, 0
    per_tick = max(1, int(load * tick))
    window = (min(60.0, send_s - 5), send_s)
    cpu_window = split = activity = None
    while time.time() - start < send_s:
        if cpu_window is None and time.time() - start >= window[0]:
            split = Split(b.p, b.p.workers[0].process.pid).start()
            activity = PgActivity(b.p.sql).start()
            cpu_window = (time.time(), cpu_seconds(b.broker_pid), time.process_time(), _machine_idle())
        b.schedule(endpoint, [round(b.rng.uniform(1, 60), 3) for _ in range(per_tick)], clients=2)
        sent += per_tick
        time.sleep(max(0.0, start + (tick * (1 + int((time.time() - start) / tick))) - time.time()))
    sent_s = time.time() - start
    assert split is not None and activity is not None and cpu_window is not None, "the window never started"
    parts = split.stop()
    db_window = activity.stop()  # counted now, divided below once the window's messages are known
    cpu_s = cpu_seconds(b.broker_pid) - cpu_window[1]
    generator_s = time.process_time() - cpu_window[2]
    cpu_wall = time.time() - cpu_window[0]
    busy = 1 - (_machine_idle() - cpu_window[3]) / (cpu_wall * os.cpu_count())
    expected = b.p.sql(
        "SELECT count(*) FROM scheduling_scheduledmessage m "
        "JOIN scheduling_endpoint e ON e.id = m.endpoint_id "
        "WHERE e.name = %s AND m.due_at >= to_timestamp(%s) AND m.due_at < to_timestamp(%s)",
        endpoint, start + window[0], start + window[1])[0][0]
    wait_until(lambda: len(b.lateness(endpoint, *window, start=start)) >= expected, 120, 1)
    stats = percentiles(b.lateness(endpoint, *window, start=start))
    # in steady state the window's messages were sent at the rate reached, and are due and delivered at it
    rate = expected / (window[1] - window[0])
    messages = max(1.0, rate * cpu_wall)  # the window's messages: every per-message figure divides by it
    per_msg = {name: round(seconds * 1e6 / messages, 1) for name, seconds in parts.items()}
    per_msg["load generator"] = round(generator_s * 1e6 / messages, 1)
    db = db_window.per(messages)
    postgres = {"line": db.line(), "top": db.top, "statements": db.statements, "transactions": db.transactions,
                "wal_bytes": db.wal_bytes, "rows": db.rows}
    return {"postgres": postgres, "judged": expected, **{k: round(v, 1) for k, v in stats.items()}, "due_per_s": round(rate),
            "sent_per_s": round(sent / sent_s), "cpu_us_per_msg": per_msg, "machine_busy": round(busy, 3),
            "broker_us_per_msg": round(cpu_s * 1e6 / messages, 1)}


def _broker_idle(b, seconds: float) -> dict:
    """The broker's CPU with the platform running and nothing sent: the idle queues' and the Erlang
    schedulers' own cost, which a load's per-message figure otherwise carries."""
    from harness.platform import MANAGEMENT
    from rabbit.management import Management

    before, start = cpu_seconds(b.broker_pid), time.time()
    time.sleep(seconds)
    share = (cpu_seconds(b.broker_pid) - before) / (time.time() - start)
    queues = Management(MANAGEMENT).overview().get("object_totals", {}).get("queues")
    return {"core_share": round(share, 4), "queues": queues}


def _machine_idle() -> float:
    """Idle CPU seconds of the whole machine since boot (/proc/stat: idle + iowait)."""
    fields = open("/proc/stat").readline().split()[1:]
    return (int(fields[3]) + int(fields[4])) / os.sysconf("SC_CLK_TCK")

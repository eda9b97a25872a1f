"""`make bench`: the six performance cases, each against its comparison in the same run, one
table at the end (and artifacts/bench.json).

    .venv/bin/python bench/suite.py [--runs 3] [--quick]

One throwaway platform serves every case (its own database and vhost, gunicorn, a platform
worker) plus a plain Celery worker (delivery loop off) for the comparisons. Timings on these
2-core machines are noisy: cases 1, 2, 3 and 5 report the median of --runs runs; holding cost
and throughput (minutes each) run once. The machine's idle share is sampled before starting.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ARTIFACTS, idle_share, percentiles, platform  # noqa: E402
from tests.support import wait_until  # noqa: E402

CELERY_QUEUE = "bench-celery"
CASES = ("idle", "burst", "rate", "hol", "throughput", "holding")


def now_ms() -> int:
    return int(time.time() * 1000)


class Bench:
    def __init__(self, p, quick: bool):
        self.p, self.quick = p, quick
        self.rng = random.Random(11)
        os.environ.update({k: v for k, v in p.env.items()
                           if k in ("DATABASE_URL", "BROKER_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE")})
        import django

        django.setup()
        from tests.testapp.tasks import started_at

        self.started_at = started_at

    # --- helpers ------------------------------------------------------------------------------

    @contextmanager
    def plain_celery(self):
        """A stock Celery worker (delivery loop off) on CELERY_QUEUE for one case; stopped and its
        queue purged afterwards, so ETA tasks one case leaves behind cannot slow the next."""
        worker = self.p.start_worker(name="celery", concurrency=2, beat=False, DELAY_DELIVERY_LOOP="0",
                                     extra_args=("-Q", CELERY_QUEUE))
        try:
            yield worker
        finally:
            worker.stop(timeout=120)
            from scheduling.conf import broker

            with broker().session() as session:
                session.purge_queue(CELERY_QUEUE)

    def endpoint(self, kind: str) -> str:
        name = f"{kind}-{uuid.uuid4().hex[:6]}"
        self.p.api("POST", "/api/endpoints/", json={"name": name})
        return name

    def schedule(self, endpoint: str, delays: list[float], clients: int = 4) -> list[str]:
        bodies = [{"messages": [{"endpoint": endpoint, "payload": {}, "delay_seconds": d} for d in delays[i:i + 1000]]}
                  for i in range(0, len(delays), 1000)]
        with ThreadPoolExecutor(clients) as pool:
            answers = list(pool.map(lambda body: self.p.api("POST", "/api/messages/bulk/", json=body), bodies))
        return [m["id"] for a in answers for m in a["messages"]]

    def count(self, endpoint: str, status: str) -> int:
        return self.p.sql("SELECT count(*) FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e "
                          "ON e.id = m.endpoint_id WHERE e.name = %s AND m.status = %s", endpoint, status)[0][0]

    def lateness(self, endpoint: str, due_from_s: float | None = None, due_to_s: float | None = None,
                 start: float | None = None) -> list[float]:
        rows = self.p.sql(
            "SELECT EXTRACT(EPOCH FROM m.delivered_at - m.due_at) * 1000, EXTRACT(EPOCH FROM m.due_at) "
            "FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e ON e.id = m.endpoint_id "
            "WHERE e.name = %s AND m.status = 'delivered'", endpoint)
        if due_from_s is None:
            return [float(r[0]) for r in rows]
        return [float(r[0]) for r in rows if start + due_from_s <= float(r[1]) < start + due_to_s]

    def celery_lateness(self, task_ids: list[str]) -> list[float]:
        rows = self.p.sql("SELECT payload FROM testapp_receipt WHERE message_id = ANY(%s)", task_ids)
        return [r[0]["started_ms"] - r[0]["due_ms"] for r in rows]

    def tree_rss_mb(self, worker) -> float:
        pids = [str(worker.process.pid)]
        pids += os.popen(f"pgrep -P {worker.process.pid}").read().split()
        total = 0
        for pid in pids:
            try:
                for line in open(f"/proc/{pid}/status"):
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                pass
        return total / 1024

    def warm_up(self) -> None:
        """Unmeasured: the first requests of each gunicorn process and the worker's first
        deliveries pay for imports, connections and caches (a first idle run was ~5x worse at p99)."""
        endpoint = self.endpoint("warm")
        for _ in range(8):
            self.schedule(endpoint, [1.0] * 100, clients=4)
        wait_until(lambda: self.count(endpoint, "delivered") >= 800, 120, 0.5, "warm-up deliveries")

    # --- 1: lateness at idle ------------------------------------------------------------------

    def lateness_idle(self) -> dict:
        n, ticks = (500 if self.quick else 2000), 20
        endpoint = self.endpoint("idle")
        celery_ids = []
        with self.plain_celery():
            for _ in range(ticks):
                delays = [round(self.rng.uniform(1, 30), 3) for _ in range(n // ticks)]
                self.schedule(endpoint, delays, clients=1)
                for d in delays:
                    celery_ids.append(self.started_at.apply_async(
                        kwargs={"due_ms": now_ms() + int(d * 1000)}, countdown=d, queue=CELERY_QUEUE).id)
                time.sleep(0.25)
            wait_until(lambda: self.count(endpoint, "delivered") >= n, 120, 0.5, "platform deliveries")
            wait_until(lambda: len(self.celery_lateness(celery_ids)) >= n, 180, 0.5, "Celery countdown tasks")
        platform_ms, celery_ms = self.lateness(endpoint), self.celery_lateness(celery_ids)
        return {"platform": {**percentiles(platform_ms), "early": sum(x < 0 for x in platform_ms)},
                "celery": {**percentiles(celery_ms), "early": sum(x < 0 for x in celery_ms)}}

    # --- 2: lateness under a burst ------------------------------------------------------------

    def burst(self) -> dict:
        n = 5000 if self.quick else 20000
        endpoint = self.endpoint("burst")
        self.schedule(endpoint, [round(self.rng.uniform(1, 4), 3) for _ in range(n)])
        wait_until(lambda: self.count(endpoint, "delivered") >= n, 300, 0.5, "burst deliveries")
        platform_ms = self.lateness(endpoint)
        return {"platform": percentiles(platform_ms), "raw": percentiles(self.raw_burst(n))}

    def raw_burst(self, n: int) -> list[float]:
        """A hand-written kombu publisher (128 unconfirmed at most) into the same cascade, and a
        consumer that notes arrival minus due: the broker's own floor for this burst."""
        from rabbit import Outgoing
        from scheduling.conf import broker
        from tests.support import bind_endpoint
        from topology import cascade

        name, v2 = f"raw-{uuid.uuid4().hex[:6]}", cascade.V2
        seen: list[float] = []
        with broker().session() as setup:
            bind_endpoint(setup, v2.prefix, name)
        done = threading.Event()

        def consume():
            with broker().session() as session:
                conn = session.conn  # kombu itself: the broker's floor, no platform code
                channel = conn.channel()
                channel.basic_qos(0, 2000, False)

                def on_message(message):
                    seen.append(now_ms() - message.headers["due"])
                    channel.basic_ack(message.delivery_tag)

                channel.basic_consume(name, callback=on_message)
                while len(seen) < n and not done.is_set():
                    try:
                        conn.drain_events(timeout=1)
                    except OSError:
                        pass

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        with broker().session() as session:
            out = []
            for _ in range(n):
                delay = self.rng.randint(1, 4)
                out.append(Outgoing(cascade.first_exchange(v2, delay), cascade.routing_key(delay, name, v2.levels),
                                    b"x", {"due": now_ms() + delay * 1000}, {"message_id": uuid.uuid4().hex}))
            session.publish(out, window=128)
        thread.join(120)
        done.set()
        return seen

    # --- 3: scheduling rate -------------------------------------------------------------------

    def scheduling_rate(self) -> dict:
        n = 5000 if self.quick else 20000
        endpoint = self.endpoint("rate")
        started = time.perf_counter()
        self.schedule(endpoint, [3600.0] * n)
        wait_until(lambda: self.count(endpoint, "published") >= n, 300, 0.05, "rows published")
        platform_rate = n / (time.perf_counter() - started)

        from rabbit import Outgoing
        from scheduling.conf import broker
        from topology import cascade

        v2 = cascade.V2
        with broker().session() as session:
            out = [Outgoing(cascade.first_exchange(v2, 3600), cascade.routing_key(3600, "nobody-raw", v2.levels),
                            b"x" * 200, {"x-dp-due-at-ms": now_ms()}, {"message_id": uuid.uuid4().hex})
                   for _ in range(n)]
            started = time.perf_counter()
            session.publish(out, window=1000)
            raw_rate = n / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(n):
            self.started_at.apply_async(kwargs={"due_ms": 0}, countdown=3600, queue="bench-sink")
        celery_rate = n / (time.perf_counter() - started)
        return {"platform": platform_rate, "raw_kombu": raw_rate, "celery": celery_rate}

    # --- 4: holding cost ----------------------------------------------------------------------

    def holding_cost(self, platform_worker) -> dict:
        """RSS of the platform worker's process tree before and after n delayed messages of hours
        are in the cascade, against a stock Celery worker holding countdown tasks. A stock worker
        takes ETA tasks in at only ~10-16/s once a backlog exists (its global prefetch grows by
        one per held task, once per loop turn: docs/performance.md), so it gets a fixed time
        and its cost per held task is scaled to n."""
        n = 20000 if self.quick else 100000
        before = self.tree_rss_mb(platform_worker)
        endpoint = self.endpoint("hold")
        self.schedule(endpoint, [round(self.rng.uniform(7200, 10800), 3) for _ in range(n)])
        wait_until(lambda: self.count(endpoint, "published") >= n, 600, 0.5, "held rows published")
        time.sleep(5)
        platform_delta = self.tree_rss_mb(platform_worker) - before

        from scheduling.conf import broker

        management = broker().management
        with self.plain_celery() as celery_worker:
            time.sleep(2)
            celery_before = self.tree_rss_mb(celery_worker)
            for _ in range(n):
                self.started_at.apply_async(kwargs={"due_ms": 0}, countdown=7200, queue=CELERY_QUEUE)
            sent = time.monotonic()
            budget = 60 if self.quick else 90

            def held() -> int:
                return (management.queue(broker().vhost, CELERY_QUEUE) or {}).get("messages_unacknowledged", 0)

            while held() < n and time.monotonic() - sent < budget:
                time.sleep(5)
            time.sleep(5)  # the management API's counts lag a few seconds
            celery_held, seconds = held(), time.monotonic() - sent
            celery_delta = self.tree_rss_mb(celery_worker) - celery_before
        per_task_kib = celery_delta * 1024 / celery_held if celery_held else None
        return {"messages": n, "platform_mb": platform_delta, "celery_held": celery_held,
                "celery_mb": celery_delta, "celery_intake_per_s": celery_held / seconds,
                "celery_kib_per_task": per_task_kib,
                "celery_mb_scaled_to_n": per_task_kib * n / 1024 if per_task_kib else None}

    # --- 5: head of line ----------------------------------------------------------------------

    def head_of_line(self, celery_too: bool) -> dict:
        endpoint = self.endpoint("hol")
        self.schedule(endpoint, [3600.0] * 3000)
        wait_until(lambda: self.count(endpoint, "published") >= 3000, 120, 0.1)
        sent = time.time()
        (message_id,) = self.schedule(endpoint, [0.0], clients=1)
        wait_until(lambda: self.p.sql("SELECT status FROM scheduling_scheduledmessage WHERE id = %s",
                                      message_id)[0][0] == "delivered", 60, 0.005, "the immediate message")
        (delivered,) = self.p.sql("SELECT EXTRACT(EPOCH FROM delivered_at) FROM scheduling_scheduledmessage "
                                  "WHERE id = %s", message_id)[0]
        result = {"platform_ms": (float(delivered) - sent) * 1000}
        if celery_too:
            with self.plain_celery():
                result["celery_ms"] = self._celery_head_of_line()
        return result

    def _celery_head_of_line(self) -> float | None:
        """Milliseconds from sending to start of an immediate task behind 3,000 countdown tasks;
        None when it has not run within 60 s."""
        for _ in range(3000):
            self.started_at.apply_async(kwargs={"due_ms": 0}, countdown=3600, queue=CELERY_QUEUE)
        sent_ms = now_ms()
        task_id = self.started_at.apply_async(kwargs={"due_ms": sent_ms}, queue=CELERY_QUEUE).id
        try:
            wait_until(lambda: self.celery_lateness([task_id]), 60, 0.01, "plain Celery's immediate task")
        except AssertionError:
            return None
        return self.celery_lateness([task_id])[0]

    # --- 6: delivered throughput --------------------------------------------------------------

    def throughput(self, loads: list[int], send_s: float) -> dict:
        """Offer a steady load with delays uniform in 1-60 s; once deliveries have reached steady
        state (after 60 s of sending) judge the messages due then: p99 lateness <= 250 ms?"""
        results = {}
        for load in loads:
            endpoint = self.endpoint(f"load{load}")
            start = time.time()
            tick = 0.5
            per_tick = max(1, int(load * tick))
            while time.time() - start < send_s:
                self.schedule(endpoint, [round(self.rng.uniform(1, 60), 3) for _ in range(per_tick)], clients=2)
                time.sleep(max(0.0, start + (tick * (1 + int((time.time() - start) / tick))) - time.time()))
            window = (min(60.0, send_s - 5), send_s)
            expected = self.p.sql(
                "SELECT count(*) FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e ON e.id = m.endpoint_id "
                "WHERE e.name = %s AND m.due_at >= to_timestamp(%s) AND m.due_at < to_timestamp(%s)",
                endpoint, start + window[0], start + window[1])[0][0]
            wait_until(lambda: len(self.lateness(endpoint, *window, start=start)) >= expected, 120, 1)
            late = self.lateness(endpoint, *window, start=start)
            stats = percentiles(late)
            results[load] = {"judged": len(late), **{k: round(v, 1) for k, v in stats.items()}}
            print(f"  load {load}/s: p99 {stats['p99']:.0f} ms over {len(late)} messages due in steady state")
            if stats["p99"] > 250:
                break
        passed = [load for load, r in results.items() if r["p99"] <= 250]
        return {"levels": results, "highest_ok": max(passed) if passed else None}


def med(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, unit="") -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}{unit}" if abs(value) >= 10 else f"{value:.1f}{unit}"


def table_rows(r: dict) -> list[tuple]:
    """(case, platform, comparison, ratio, target, met) for each case that ran."""
    rows = []
    if "idle" in r:
        p99 = med([x["platform"]["p99"] for x in r["idle"]]); c99 = med([x["celery"]["p99"] for x in r["idle"]])
        early = sum(x["platform"]["early"] for x in r["idle"])
        ratio = c99 / p99 if p99 and c99 else None
        rows += [("1 idle lateness p99", fmt(p99, " ms"), f"{fmt(c99, ' ms')} (Celery countdown)",
                  fmt(ratio, "x"), "≤ 25 ms and ≥ 30x lower", p99 is not None and p99 <= 25 and (ratio or 0) >= 30),
                 ("1 idle: early deliveries", str(early), str(sum(x["celery"]["early"] for x in r["idle"])), "—", "0",
                  early == 0)]
    if "burst" in r:
        b99 = med([x["platform"]["p99"] for x in r["burst"]]); r99 = med([x["raw"]["p99"] for x in r["burst"]])
        rows.append(("2 burst lateness p99", fmt(b99, " ms"), f"{fmt(r99, ' ms')} (raw kombu, window 128)",
                     fmt(b99 / r99 if b99 and r99 else None, "x"), "≤ 400 ms", b99 is not None and b99 <= 400))
    if "rate" in r:
        prate = med([x["platform"] for x in r["rate"]]); raw = med([x["raw_kombu"] for x in r["rate"]])
        crate = med([x["celery"] for x in r["rate"]])
        rows += [("3 scheduling rate", fmt(prate, "/s"), f"{fmt(raw, '/s')} (raw kombu, confirms)",
                  f"{prate / raw:.2f}x", "≥ 5,000/s", prate >= 5000),
                 ("3 scheduling rate", fmt(prate, "/s"), f"{fmt(crate, '/s')} (Celery countdown, no confirms)",
                  f"{prate / crate:.2f}x", "—", None)]
    if "holding" in r:
        h = r["holding"]
        rows.append(("4 holding cost", f"+{h['platform_mb']:.1f} MB",
                     f"≈ +{fmt(h['celery_mb_scaled_to_n'], ' MB')} (Celery: {fmt(h['celery_kib_per_task'])} KiB/task "
                     f"over {h['celery_held']:,} held)", "—", f"≤ +10 MB for {h['messages']:,}", h["platform_mb"] <= 10))
    if "head_of_line" in r:
        hol = med([x["platform_ms"] for x in r["head_of_line"]]); chol = r["head_of_line"][0].get("celery_ms")
        rows.append(("5 head of line", fmt(hol, " ms"),
                     "not run within 60 s (Celery)" if chol is None else f"{fmt(chol, ' ms')} (Celery)",
                     "—" if chol is None else fmt(chol / hol, "x"), "< 100 ms", hol is not None and hol < 100))
    if "throughput" in r:
        t = r["throughput"]
        rows.append(("6 delivered throughput", f"{t['highest_ok'] or 0:,}/s", "—", "—",
                     "highest load with p99 ≤ 250 ms", None))
    return rows


def print_table(rows: list[tuple]) -> None:
    header = ("case", "platform", "comparison", "ratio", "target", "met")
    cells = [[str(c) for c in row[:5]] + ["—" if row[5] is None else ("met" if row[5] else "MISSED")] for row in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *cells)]
    for line in (header, *cells):
        print(" | ".join(str(x).ljust(w) for x, w in zip(line, widths)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one run: to try the suite")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    args = parser.parse_args()
    cases = args.cases.split(",")
    if unknown := set(cases) - set(CASES):
        parser.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    runs = 1 if args.quick else args.runs
    idle = idle_share(2.0)
    started = time.monotonic()
    results: dict = {"machine": {"cpus": os.cpu_count(), "idle_share_before": round(idle, 2)}, "runs": runs}

    def step(title: str) -> None:
        print(f"[{(time.monotonic() - started) / 60:4.1f} min] {title}", flush=True)

    with platform(web_workers=4, settings="delayplatform.settings_test") as p:
        platform_worker = p.start_worker(name="platform", concurrency=2)
        b = Bench(p, args.quick)
        step("warm-up"); b.warm_up()
        if "idle" in cases:
            step("1 lateness at idle"); results["idle"] = [b.lateness_idle() for _ in range(runs)]
        if "burst" in cases:
            step("2 burst"); results["burst"] = [b.burst() for _ in range(runs)]
        if "rate" in cases:
            step("3 scheduling rate"); results["rate"] = [b.scheduling_rate() for _ in range(runs)]
        if "hol" in cases:
            step("5 head of line"); results["head_of_line"] = [b.head_of_line(celery_too=i == 0) for i in range(runs)]
        if "throughput" in cases:
            step("6 delivered throughput")
            loads = [250, 500] if args.quick else [500, 750, 1000, 1500, 2000]
            results["throughput"] = b.throughput(loads, send_s=30 if args.quick else 70)
        if "holding" in cases:
            step("4 holding cost"); results["holding"] = b.holding_cost(platform_worker)
        step("done")
    results["minutes"] = round((time.monotonic() - started) / 60, 1)
    rows = table_rows(results)
    results["table"] = [dict(zip(("case", "platform", "comparison", "ratio", "target", "met"), r)) for r in rows]
    print(f"\nmachine: {os.cpu_count()} CPUs, {idle:.0%} idle before the run; medians of {runs} run(s); "
          f"{results['minutes']} min")
    print_table(rows)
    (ARTIFACTS / "bench.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {ARTIFACTS / 'bench.json'}")


if __name__ == "__main__":
    main()

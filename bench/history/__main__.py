"""`make bench-history`: the platform's figures with 0, 10 M and 50 M finished messages in its
table, side by side in one run: the bulk scheduling rate (the raw publisher's beside it), idle
lateness p99, delivered throughput, and the admin's and the API's pages; each against the
empty table (target: within 10 %), the pages against their own targets (admin < 1 s, API <
300 ms); and the bytes a message costs the table, with the size 7 days at 1,000/s make.

    .venv/bin/python -m bench.history [--sizes 0,10000000,50000000] [--quick]

One throwaway platform (harness/platform.py: its own database and vhost, gunicorn with 4 workers,
a platform worker) serves every size; between sizes the worker is stopped and
bench/history/fill.py adds finished rows (indexes rebuilt, VACUUM ANALYZE), as 7 days of
retention hold them. ~25 minutes at full size on an idle 2-core machine (the fills take ~12 of them); --quick
(0, 200,000 and 1 M rows, smaller cases) takes ~12. Prints one table; writes
artifacts/bench-history.json with every run's figures and the EXPLAIN plans."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from bench.history import pages as history_pages
from bench.history.cases import STEADY_ROWS, Cases
from bench.history.fill import ENDPOINT_PREFIX, ENDPOINTS, history_fill
from bench.measure import idle_share
from harness.paths import ARTIFACTS
from harness.platform import platform

FULL = (0, 10_000_000, 50_000_000)
QUICK = (0, 200_000, 1_000_000)
WITHIN = 0.10  # of the empty table's figure
# case -> (label, higher is better, unit)
CASES = {"rate": ("bulk scheduling rate", True, "/s"), "idle": ("idle lateness p99", False, " ms"),
         "throughput": ("delivered throughput (due at once)", True, "/s")}


def fmt(value, unit="") -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}{unit}" if abs(value) >= 10 else f"{value:.2f}{unit}" if abs(value) < 1 else f"{value:.1f}{unit}"


class Run:
    def __init__(self, p, quick: bool):
        from bench.cases.base import Bench

        self.p, self.quick = p, quick
        self.bench = Bench(p, quick, ("v3",))
        self.cases = Cases(self.bench)
        self.started = time.monotonic()
        self.rows = 0

    def step(self, title: str) -> None:
        print(f"[{(time.monotonic() - self.started) / 60:5.1f} min] {title}", flush=True)

    def endpoints(self) -> None:
        """history-00 … history-19 through the API (their queues bound: the worker consumes
        every active endpoint), even ones on v3, odd ones on v2, before any fill uses them."""
        for k in range(ENDPOINTS):
            self.p.api("POST", "/api/endpoints/", json={"name": f"{ENDPOINT_PREFIX}{k:02d}",
                                                        "topology": "v3" if k % 2 == 0 else "v2"})

    def grow_to(self, rows: int) -> dict:
        """Stop the worker (the sweeper's queries would scan the table while its indexes are
        rebuilt), add the rows, start it again and warm it up."""
        for worker in self.p.workers:
            worker.stop(timeout=60)
        filled = history_fill(database_url=self.p.env["DATABASE_URL"], rows=rows - self.rows,
                              progress=lambda line: print("   ", line, flush=True))
        self.rows = rows
        for worker in self.p.workers:
            worker.start()
        self.bench.warm_up()
        return {"seconds": round(filled.seconds), "rows_per_s": round(filled.rate)}

    def settle(self) -> float:
        """Seconds until the disk is quiet: a CHECKPOINT, then the kernel's dirty pages written.
        A fill leaves GBs of dirty pages behind; flushed while a case runs, they stall its
        commits' fsyncs (a first run measured idle p99 109 ms and 20 % less rate at 10 M and
        50 M, the raw publisher 10 % slower too), which a table that grew over days has not."""
        started = time.monotonic()
        self.cases.execute("CHECKPOINT")
        os.sync()
        while dirty_bytes() > 64 << 20 and time.monotonic() - started < 600:
            time.sleep(1)
        return round(time.monotonic() - started, 1)

    def measure(self, size: int) -> dict:
        n = 5000 if self.quick else 20000
        self.step(f"{size:,} rows: disk settling (CHECKPOINT, sync)")
        result = {"settle_s": self.settle(), "idle_share_before": round(idle_share(2.0), 2)}
        self.step(f"{size:,} rows: scheduling rate")
        result["rate"] = self.cases.scheduling_rate(n, runs=1 if self.quick else 5)
        self.step(f"{size:,} rows: idle lateness")
        result["idle"] = self.cases.lateness_idle(500 if self.quick else 2000, runs=1 if self.quick else 2)
        self.step(f"{size:,} rows: delivered throughput")
        result["throughput"] = self.cases.throughput(n, runs=1 if self.quick else 3)
        if size == 0:
            self.step("bytes per message")
            result["bytes"] = self.cases.bytes_per_message(n)
        self.step(f"{size:,} rows: pages")
        # statistics, as autoanalyze keeps them (autovacuum is off on this shared server: without
        # them PostgreSQL chose sequential scans for the endpoints' counts of the empty table's 150,000 bench rows)
        self.cases.execute("ANALYZE scheduling_scheduledmessage")
        admin = history_pages.login(self.p.url, "bench", "x")
        result["pages"] = history_pages.measure(url=self.p.url, database_url=self.p.env["DATABASE_URL"], admin=admin,
                                                key=self.p.key, repeat=3 if self.quick else 5,
                                                progress=lambda line: print(line, flush=True))
        from bench.history.plans import plans

        result["plans"] = plans(self.p.env["DATABASE_URL"])
        result["table_gb"] = round(self.cases.table_bytes() / 1e9, 2)
        return result


def dirty_bytes() -> int:
    """Dirty and under-writeback page cache (/proc/meminfo), bytes."""
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return sum(int(fields[k].split()[0]) * 1024 for k in ("Dirty", "Writeback"))


def figure(result: dict, case: str):
    return {"rate": lambda r: r["rate"]["per_s"], "idle": lambda r: r["idle"]["p99_ms"],
            "throughput": lambda r: r["throughput"]["per_s"]}[case](result)


def within(empty, value, higher_better: bool) -> bool:
    return value >= empty * (1 - WITHIN) if higher_better else value <= empty * (1 + WITHIN)


def table(results: dict[int, dict]) -> list[list[str]]:
    sizes = list(results)
    header = ["figure", *(f"{s:,} rows" for s in sizes), "target", "met"]
    rows = [header]
    empty = results[sizes[0]]
    for case, (label, higher, unit) in CASES.items():
        values = [figure(results[s], case) for s in sizes]
        met = all(within(values[0], v, higher) for v in values[1:])
        rows.append([label, *(fmt(v, unit) for v in values), "within 10 % of empty", "met" if met else "MISSED"])
        if case == "rate":
            rows.append(["  raw publisher, same moment", *(fmt(results[s]["rate"]["raw_per_s"], "/s") for s in sizes),
                         "(the broker's own figure)", ""])
        if case in ("rate", "throughput"):
            for part in results[sizes[0]][case]["cost"]:
                unit = " µs" if part.endswith("µs") else ""
                rows.append([f"  per message: {part.removesuffix(' µs')}",
                             *(fmt(results[s][case]["cost"].get(part), unit) for s in sizes), "(where it went)", ""])
    for name, page in empty["pages"].items():
        values = [results[s]["pages"][name]["median_ms"] for s in sizes]
        ok = all(results[s]["pages"][name]["status"] == 200 for s in sizes)
        met = ok and values[-1] < page["target_ms"]
        rows.append([name, *(fmt(v, " ms") for v in values), f"< {page['target_ms']:,} ms",
                     "met" if met else "MISSED"])
    rows.append(["table + indexes", *(f"{results[s]['table_gb']:.1f} GB" for s in sizes), "", ""])
    return rows


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK}, smaller cases, one run each")
    parser.add_argument("--sizes", help="comma-separated row counts, the first 0 (default: 0,10M,50M)")
    args = parser.parse_args()
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else (QUICK if args.quick else FULL)
    if sizes[0] != 0 or list(sizes) != sorted(sizes):
        parser.error("--sizes must start at 0 and grow")
    idle = idle_share(2.0)
    results: dict = {}
    with platform(web_workers=4, settings="delayplatform.settings_test") as p:
        p.start_worker(name="platform", concurrency=2)
        run = Run(p, args.quick)
        run.endpoints()
        run.step("warm-up")
        run.bench.warm_up()
        fills = {}
        for size in sizes:
            if size:
                run.step(f"filling to {size:,} finished rows")
                fills[size] = run.grow_to(size)
            results[size] = run.measure(size)
        run.step("done")
        minutes = round((time.monotonic() - run.started) / 60, 1)
    rows = table(results)
    b = results[0]["bytes"]
    shares = ", ".join(f"{results[s]['idle_share_before']:.0%}" for s in sizes)
    settles = ", ".join(f"{results[s]['settle_s']:.0f} s" for s in sizes)
    print(f"\nmachine: {os.cpu_count()} CPUs, {idle:.0%} idle before the run (before each size: {shares}; "
          f"disk settled in {settles}); {minutes} min")
    print_table(rows)
    print(f"\nbytes per message (table + indexes + TOAST, v3, {b['messages']:,} real messages pending -> published -> "
          f"delivered):\n  as written, before VACUUM: {b['written']:,.0f} B   after VACUUM (the next messages reuse the "
          f"space): {b['after_vacuum']:,.0f} B   live (VACUUM FULL): {b['live']:,.0f} B")
    print("  after VACUUM by part: " + ", ".join(f"{k.removeprefix('scheduling_scheduledmessage_')} {v:,.0f} B"
                                                for k, v in b["after_vacuum_by_part"].items() if v))
    print(f"steady state at 1,000/s with 7 days' retention ({STEADY_ROWS:,} rows; without the indexes of messages "
          f"in flight, {b['in_flight_indexes_after_vacuum']:,.0f} B of the after-VACUUM figure, which follow the "
          f"messages in flight, not the retention): "
          f"{b['steady_gb']['after_vacuum']:,.0f} GB with autovacuum (live {b['steady_gb']['live']:,.0f} GB; "
          f"never vacuumed {b['steady_gb']['written']:,.0f} GB)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / "bench-history.json"
    out.write_text(json.dumps({"sizes": sizes, "minutes": minutes, "idle_share_before": idle, "fills": fills,
                               "results": results, "table": rows}, indent=2, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

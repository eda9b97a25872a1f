"""`make bench`: the six performance cases on v2 and v3 side by side, each against its
comparisons in the same run, one table at the end (and artifacts/bench.json).

    .venv/bin/python -m bench.suite [--runs 3] [--quick] [--cases idle,burst] [--versions v2,v3] [--envelopes on]

One throwaway platform serves every case (its own database and vhost, gunicorn, a platform
worker) plus, per case, the comparisons: a hand-written kombu publisher into the same cascade
("raw"), Celery's own native delayed delivery (quorum task queue, bench/celery_native.py) and a
stock Celery worker taking ``apply_async(countdown=…)`` (delivery loop off). Timings on these
2-core machines are noisy: cases 1, 2, 3 and 5 report the median of --runs runs; holding cost and
throughput (minutes each) run once. Broker CPU is the node's own (bench/broker_cpu.py).

This module runs them and nothing else: each case is a module of bench/cases/ (their shared
client, ``Bench``, in bench/cases/base.py) and the table is bench/table.py.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from bench.cases import burst, hol, holding, idle, rate, throughput
from bench.cases.base import Bench
from bench.measure import idle_share
from bench.table import print_table, table_rows
from harness.paths import ARTIFACTS
from harness.platform import platform

CASES = ("idle", "burst", "burst100k", "rate", "hol", "throughput", "holding")
VERSIONS = ("v2", "v3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one run: to try the suite")
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--versions", default=",".join(VERSIONS), help="cascade versions to run side by side")
    parser.add_argument("--envelopes", choices=("on", "off"), default="off",
                        help="DELAY_ENVELOPES of the platform under test (v3: many messages per broker message)")
    args = parser.parse_args()
    cases, versions = args.cases.split(","), tuple(args.versions.split(","))
    if unknown := set(cases) - set(CASES):
        parser.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    if unknown := set(versions) - {"v1", "v2", "v3"}:
        parser.error(f"unknown version(s): {', '.join(sorted(unknown))}")
    runs = 1 if args.quick else args.runs
    idle_before = idle_share(2.0)
    started = time.monotonic()
    results: dict = {"machine": {"cpus": os.cpu_count(), "idle_share_before": round(idle_before, 2)},
                     "runs": runs, "versions": list(versions), "envelopes": args.envelopes}

    def step(title: str) -> None:
        print(f"[{(time.monotonic() - started) / 60:4.1f} min] {title}", flush=True)

    with platform(web_workers=4, settings="delayplatform.settings_test", DELAY_ENVELOPES=args.envelopes) as p:
        platform_worker = p.start_worker(name="platform", concurrency=2)
        b = Bench(p, args.quick, versions)
        step("warm-up"); b.warm_up()
        if "idle" in cases:
            step("1 lateness at idle"); results["idle"] = [idle.run(b) for _ in range(runs)]
        if "burst" in cases:
            step("2 burst"); results["burst"] = [burst.run(b) for _ in range(runs)]
        if "burst100k" in cases:
            step("2b burst of 100,000")
            results["burst100k"] = [burst.run(b, n=20000 if args.quick else 100_000, delays=(1, 10), native=False)
                                    for _ in range(runs)]
        if "rate" in cases:
            step("3 scheduling rate"); results["rate"] = [rate.run(b) for _ in range(runs)]
        if "hol" in cases:
            step("5 head of line")
            results["head_of_line"] = [hol.run(b, comparisons=i == 0) for i in range(runs)]
        if "throughput" in cases:
            step("6 delivered throughput")
            results["throughput"] = throughput.run(b)
        if "holding" in cases:
            step("4 holding cost"); results["holding"] = holding.run(b, platform_worker)
        step("done")
    results["minutes"] = round((time.monotonic() - started) / 60, 1)
    rows = table_rows(results)
    results["table"] = [dict(zip(("case", "v2", "v3", "comparison", "target", "met"), r)) for r in rows]
    print(f"\nmachine: {os.cpu_count()} CPUs, {idle_before:.0%} idle before the run; "
          f"medians of {runs} run(s); {results['minutes']} min")
    print_table(rows)
    (ARTIFACTS / "bench.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {ARTIFACTS / 'bench.json'}")


if __name__ == "__main__":
    main()

"""`make bench`: the six performance cases on v2 and v3 side by side, each against its
comparisons in the same run, one table at the end (and artifacts/bench.json).

    .venv/bin/python -m bench.suite [--runs 3] [--quick] [--cases idle,burst] [--versions v2,v3] [--envelopes on]
                                    [--rabbitmq 3.10,4.0]

One throwaway platform serves every case (its own database and vhost, gunicorn, a platform
worker) plus, per case, the comparisons: a hand-written kombu publisher into the same cascade
("raw"), Celery's own native delayed delivery (quorum task queue, bench/celery_native.py) and a
stock Celery worker taking ``apply_async(countdown=…)`` (delivery loop off). Timings on these
2-core machines are noisy: cases 1, 2, 3 and 5 report the median of --runs runs; holding cost and
throughput (minutes each) run once. Broker CPU is the node's own (bench/broker_cpu.py).

Idle lateness and the 20,000 burst run on both broker series the platform supports: the
machine's RabbitMQ (3.10.8), then RabbitMQ 4.0.5 (Debian 13's, in its root: scripts/rabbitmq4.sh)
on a node of its own, each beside the raw floor measured on that same broker (a child process
of this module, with its own platform, database and Django settings).

This module runs them and nothing else: each case is a module of bench/cases/ (their shared
client, ``Bench``, in bench/cases/base.py) and the table is bench/table.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bench.cases import burst, hol, holding, idle, rate, throughput
from bench.cases.base import Bench
from bench.measure import idle_share
from bench.table import print_table, table_rows
from harness.paths import ARTIFACTS
from harness.platform import MANAGEMENT, platform

CASES = ("idle", "burst", "burst100k", "rate", "hol", "throughput", "holding")
VERSIONS = ("v2", "v3")
SERIES_CASES = ("idle", "burst")  # what also runs on RabbitMQ 4.0.5
RABBITMQ4_PORT = 5795  # the 4.0.5 node's AMQP port (management +10000), apart from tests' and make run's


def broker_version(management_url: str) -> str:
    from rabbit import Management

    return Management(management_url).overview().get("rabbitmq_version", "?")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one run: to try the suite")
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--versions", default=",".join(VERSIONS), help="cascade versions to run side by side")
    parser.add_argument("--envelopes", choices=("on", "off"), default="off",
                        help="DELAY_ENVELOPES of the platform under test (v3: many messages per broker message)")
    parser.add_argument("--rabbitmq", default="3.10,4.0",
                        help="broker series: 3.10 (the machine's, every case), 4.0 (4.0.5 in its root: idle and burst)")
    parser.add_argument("--on-rabbitmq4", metavar="JSON", help=argparse.SUPPRESS)  # the child run on 4.0.5
    args = parser.parse_args()
    cases, versions = args.cases.split(","), tuple(args.versions.split(","))
    if unknown := set(cases) - set(CASES):
        parser.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    if unknown := set(versions) - {"v1", "v2", "v3"}:
        parser.error(f"unknown version(s): {', '.join(sorted(unknown))}")
    series = args.rabbitmq.split(",")
    if unknown := set(series) - {"3.10", "4.0"}:
        parser.error(f"unknown RabbitMQ series: {', '.join(sorted(unknown))} (3.10 or 4.0)")
    runs = 1 if args.quick else args.runs
    if args.on_rabbitmq4:
        return on_rabbitmq4(args, cases, versions, runs)
    if "3.10" not in series:
        cases = []
    idle_before = idle_share(2.0)
    started = time.monotonic()
    results: dict = {"machine": {"cpus": os.cpu_count(), "idle_share_before": round(idle_before, 2)},
                     "runs": runs, "versions": list(versions), "envelopes": args.envelopes}

    def step(title: str) -> None:
        print(f"[{(time.monotonic() - started) / 60:4.1f} min] {title}", flush=True)

    if cases:
        with platform(web_workers=4, settings="delayplatform.settings_test", DELAY_ENVELOPES=args.envelopes) as p:
            results["broker"] = broker_version(MANAGEMENT)
            run_cases(p, args, cases, versions, runs, results, step)
    four = [c for c in args.cases.split(",") if c in SERIES_CASES] if "4.0" in series else []
    if four:
        step(f"RabbitMQ 4.0.5: {', '.join(four)} (a child run with a platform of its own)")
        target = ARTIFACTS / "bench-rabbitmq4.json"
        subprocess.run([sys.executable, "-m", "bench.suite", "--on-rabbitmq4", str(target), "--cases", ",".join(four),
                        "--runs", str(runs), "--versions", ",".join(versions), "--envelopes", args.envelopes]
                       + (["--quick"] if args.quick else []), check=True)
        results["rabbitmq4"] = json.loads(target.read_text())
    step("done")
    results["minutes"] = round((time.monotonic() - started) / 60, 1)
    rows = table_rows(results)
    if "rabbitmq4" in results:
        rows += [(f"[{results['rabbitmq4']['broker']}] {row[0]}", *row[1:]) for row in table_rows(results["rabbitmq4"])]
    results["table"] = [dict(zip(("case", "v2", "v3", "comparison", "target", "met"), r)) for r in rows]
    print(f"\nmachine: {os.cpu_count()} CPUs, {idle_before:.0%} idle before the run; "
          f"medians of {runs} run(s); {results['minutes']} min; RabbitMQ {results.get('broker', '—')}"
          + (f", rows marked [{results['rabbitmq4']['broker']}] on that broker" if "rabbitmq4" in results else ""))
    print_table(rows)
    (ARTIFACTS / "bench.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {ARTIFACTS / 'bench.json'}")


def run_cases(p, args, cases, versions, runs, results, step) -> None:
    """Every case asked for, on platform ``p`` (the machine's broker)."""
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


def on_rabbitmq4(args, cases, versions, runs) -> None:
    """The child run: idle and burst on a RabbitMQ 4.0.5 node of its own, each beside the raw
    floor on that node (no Celery native: its figures are the machine's broker's rows)."""
    from harness.rabbit_node import PrivateRabbit

    results: dict = {"runs": runs, "versions": list(versions)}
    with PrivateRabbit(port=RABBITMQ4_PORT, management_port=RABBITMQ4_PORT + 10000, series=4) as node, \
            platform(web_workers=4, broker_url=node.url, settings="delayplatform.settings_test",
                     RABBITMQ_MANAGEMENT_URL=node.management_url, DELAY_ENVELOPES=args.envelopes) as p:
        results["broker"] = broker_version(node.management_url)
        p.start_worker(name="platform", concurrency=2)
        b = Bench(p, args.quick, versions, broker_process=node.pid())
        b.warm_up()
        if "idle" in cases:
            print(f"[{results['broker']}] 1 lateness at idle", flush=True)
            results["idle"] = [idle.run(b, native=False) for _ in range(runs)]
        if "burst" in cases:
            print(f"[{results['broker']}] 2 burst", flush=True)
            results["burst"] = [burst.run(b, native=False) for _ in range(runs)]
    with open(args.on_rabbitmq4, "w") as out:
        json.dump(results, out, indent=2, default=str)


if __name__ == "__main__":
    main()

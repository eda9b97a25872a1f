"""`make bench`: the performance cases of the default deployment (v3, envelopes on), v2 beside it.

Each figure stands against its floor measured in the same run; one table at the end (and
artifacts/bench.json).

    .venv/bin/python -m bench.suite [--runs 3] [--quick] [--cases idle,burst] [--versions v2,v3] [--envelopes on]
                                    [--other-envelopes burst] [--rabbitmq 3.10,4.0]

One throwaway platform serves every case (its own database and vhost, gunicorn, a platform
worker; ``DELAY_ENVELOPES`` as --envelopes, on by default as in the platform, and webhooks allowed
to 127.0.0.0/8 for the local receivers) plus, per case, the comparisons: a hand-written kombu
publisher into the same cascade ("raw"), Celery's own native delayed delivery (quorum task queue,
bench/celery_native.py), a stock Celery worker taking ``apply_async(countdown=…)`` (delivery loop
off), and for webhooks a bare async client against the same receiver (bench/http_clients.py).
Timings on these 2-core machines are noisy: idle, the bursts, rate, head of line, webhooks and
the tarpit report the median of --runs runs; holding cost, throughput, the flood and fan-out
(minutes each) run once. Broker CPU is the node's own (bench/broker_cpu.py).

The cases named by --other-envelopes (the 20,000 burst by default) run again with the other
``DELAY_ENVELOPES`` setting, v3 only, in a child run with a platform of its own: extra rows marked
[envelopes off] (or on), beside their own raw floor, with no target (the targets are the default
deployment's).

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

from bench.cases import burst, fanout, hol, holding, idle, isolation, ordering, rate, throughput, webhooks
from bench.cases.base import Bench
from bench.measure import idle_share
from bench.table import print_table, table_rows
from harness.paths import ARTIFACTS
from harness.platform import MANAGEMENT, platform

CASES = ("idle", "burst", "burst100k", "rate", "hol", "throughput", "holding", "webhooks", "tarpit", "flood", "fanout",
         "ordering")
VERSIONS = ("v2", "v3")
SERIES_CASES = ("idle", "burst")  # what also runs on RabbitMQ 4.0.5
# the platform's webhook SSRF guard refuses loopback: the local receivers of the webhook cases need it
PLATFORM_SETTINGS = {"DELAY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}
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
    parser.add_argument("--envelopes", choices=("on", "off"), default="on",
                        help="DELAY_ENVELOPES of the platform under test (v3: many messages per broker message); "
                             "on, the platform's default")
    parser.add_argument("--other-envelopes", default="burst", metavar="CASES",
                        help="cases also run with the other DELAY_ENVELOPES setting (v3, a child run of their own): "
                             "extra rows; '' for none")
    parser.add_argument("--rabbitmq", default="3.10,4.0",
                        help="broker series: 3.10 (the machine's, every case), 4.0 (4.0.5 in its root: idle and burst)")
    parser.add_argument("--on-rabbitmq4", metavar="JSON", help=argparse.SUPPRESS)  # the child run on 4.0.5
    parser.add_argument("--child", metavar="JSON", help=argparse.SUPPRESS)  # the other envelopes setting's run
    args = parser.parse_args()
    cases, versions = args.cases.split(","), tuple(args.versions.split(","))
    other_cases = [c for c in args.other_envelopes.split(",") if c]
    if unknown := (set(cases) | set(other_cases)) - set(CASES):
        parser.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    if unknown := set(versions) - {"v1", "v2", "v3"}:
        parser.error(f"unknown version(s): {', '.join(sorted(unknown))}")
    series = args.rabbitmq.split(",")
    if unknown := set(series) - {"3.10", "4.0"}:
        parser.error(f"unknown RabbitMQ series: {', '.join(sorted(unknown))} (3.10 or 4.0)")
    runs = 1 if args.quick else args.runs
    if args.on_rabbitmq4:
        return on_rabbitmq4(args, cases, versions, runs)
    if args.child:
        return child(args, cases, versions, runs)
    if "3.10" not in series:
        cases = []
    idle_before = idle_share(2.0)
    started = time.monotonic()
    results: dict = {"machine": {"cpus": os.cpu_count(), "idle_share_before": round(idle_before, 2)},
                     "runs": runs, "versions": list(versions), "envelopes": args.envelopes}

    def step(title: str) -> None:
        print(f"[{(time.monotonic() - started) / 60:4.1f} min] {title}", flush=True)

    if cases:
        with platform(web_workers=4, settings="delayplatform.settings_test", DELAY_ENVELOPES=args.envelopes,
                      **PLATFORM_SETTINGS) as p:
            results["broker"] = broker_version(MANAGEMENT)
            run_cases(p, args, cases, versions, runs, results, step)
    other = [c for c in other_cases if c in cases] if "v3" in versions else []
    if other:
        setting = "off" if args.envelopes == "on" else "on"
        step(f"envelopes {setting}: {', '.join(other)} (v3, a child run with a platform of its own)")
        target = ARTIFACTS / "bench-envelopes.json"
        subprocess.run([sys.executable, "-m", "bench.suite", "--child", str(target), "--cases", ",".join(other),
                        "--runs", str(runs), "--versions", "v3", "--envelopes", setting, "--rabbitmq", "3.10"]
                       + (["--quick"] if args.quick else []), check=True)
        results["other_envelopes"] = json.loads(target.read_text())
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
    if "other_envelopes" in results:
        other_run = results["other_envelopes"]
        rows += [(f"[envelopes {other_run['envelopes']}] {row[0]}", *row[1:4], "—", None)
                 for row in table_rows(other_run)]
    if "rabbitmq4" in results:
        rows += [(f"[{results['rabbitmq4']['broker']}] {row[0]}", *row[1:]) for row in table_rows(results["rabbitmq4"])]
    results["table"] = [dict(zip(("case", "v2", "v3", "comparison", "target", "met"), r)) for r in rows]
    print(f"\nmachine: {os.cpu_count()} CPUs, {idle_before:.0%} idle before the run; envelopes {args.envelopes}; "
          f"medians of {runs} run(s); {results['minutes']} min; RabbitMQ {results.get('broker', '—')}"
          + (f", rows marked [{results['rabbitmq4']['broker']}] on that broker" if "rabbitmq4" in results else ""))
    print_table(rows)
    (ARTIFACTS / "bench.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {ARTIFACTS / 'bench.json'}")


def run_cases(p, args, cases, versions, runs, results, step, comparisons: bool = True) -> None:
    """Every case asked for, on platform ``p`` (the machine's broker); ``comparisons``: Celery's
    too (a child run leaves them to its parent, whose rows have them)."""
    platform_worker = p.start_worker(name="platform", concurrency=2)
    b = Bench(p, args.quick, versions)
    step("warm-up")
    b.warm_up()
    if "idle" in cases:
        step("1 lateness at idle")
        results["idle"] = [idle.run(b, native=comparisons) for _ in range(runs)]
    if "burst" in cases:
        step("2 burst")
        results["burst"] = [burst.run(b, native=comparisons) for _ in range(runs)]
    if "burst100k" in cases:
        step("2b burst of 100,000")
        results["burst100k"] = [burst.run(b, n=20000 if args.quick else 100_000, delays=(1, 10), native=False)
                                for _ in range(runs)]
    if "rate" in cases:
        step("3 scheduling rate")
        results["rate"] = [rate.run(b) for _ in range(runs)]
    if "hol" in cases:
        step("5 head of line")
        results["head_of_line"] = [hol.run(b, comparisons=i == 0) for i in range(runs)]
    if "throughput" in cases:
        step("6 delivered throughput")
        results["throughput"] = throughput.run(b)
    if "holding" in cases:
        step("4 holding cost")
        results["holding"] = holding.run(b, platform_worker)
    engine = "v3" if "v3" in versions else versions[-1]  # the delivery engine is the same for every version
    if "webhooks" in cases:
        step(f"7 webhooks ({engine})")
        results["webhooks"] = [webhooks.run(b, engine) for _ in range(runs)]
    if "tarpit" in cases:
        step(f"8a isolation: a tarpit receiver ({engine})")
        results["tarpit"] = [isolation.tarpit(b, engine) for _ in range(runs)]
    if "flood" in cases:
        step(f"8b isolation: one team's flood ({engine})")
        results["flood"] = isolation.flood(b, engine)
    if "fanout" in cases and "v3" in versions:  # events' one copy needs envelopes: v3 only
        step("9 fan-out 1 and 50, beside separate messages (v3)")
        results["fanout"] = fanout.run(b, "v3")
    if "ordering" in cases:
        step(f"10 ordering keys: none, many, one ({engine})")
        results["ordering"] = ordering.run(b, engine)


def child(args, cases, versions, runs) -> None:
    """The child run of the other envelopes setting: those cases on a platform of their own (the
    machine's broker), results to the --child file, no table."""
    results: dict = {"runs": runs, "versions": list(versions), "envelopes": args.envelopes}
    started = time.monotonic()

    def step(title: str) -> None:
        print(f"[envelopes {args.envelopes}] [{(time.monotonic() - started) / 60:4.1f} min] {title}", flush=True)

    with platform(web_workers=4, settings="delayplatform.settings_test", DELAY_ENVELOPES=args.envelopes,
                  **PLATFORM_SETTINGS) as p:
        results["broker"] = broker_version(MANAGEMENT)
        run_cases(p, args, cases, versions, runs, results, step, comparisons=False)
    with open(args.child, "w") as out:
        json.dump(results, out, indent=2, default=str)


def on_rabbitmq4(args, cases, versions, runs) -> None:
    """The child run: idle and burst on a RabbitMQ 4.0.5 node of its own, each beside the raw
    floor on that node (no Celery native: its figures are the machine's broker's rows)."""
    from harness.rabbit_node import PrivateRabbit

    results: dict = {"runs": runs, "versions": list(versions)}
    with PrivateRabbit(port=RABBITMQ4_PORT, management_port=RABBITMQ4_PORT + 10000, series=4) as node, \
            platform(web_workers=4, broker_url=node.url, settings="delayplatform.settings_test",
                     RABBITMQ_MANAGEMENT_URL=node.management_url, DELAY_ENVELOPES=args.envelopes,
                     **PLATFORM_SETTINGS) as p:
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

"""Where a scheduled message's CPU goes: web (gunicorn), worker (relay, delivery loop), PostgreSQL,
RabbitMQ and the client, measured from /proc over one run of case 3 or case 2.

    .venv/bin/python -m bench.cpu_split --version v3 --case rate [--messages 20000] [--py-spy DIR]

Prints CPU microseconds per message for each part and the wall time; with --py-spy, also
records the web workers and the platform worker while it runs (py-spy's collapsed stacks, which
``py-spy``'s flame graph tools and speedscope read) and prints the busiest functions of each.
This is the evidence behind "what limits each figure" in docs/operations/performance.md.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from bench.broker_cpu import broker_pid, processes_cpu_seconds
from bench.cases.base import Bench
from harness.paths import ARTIFACTS
from harness.platform import platform
from harness.waiting import wait_until


def tree(pid: int) -> list[int]:
    """A process and all its descendants."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += [int(c) for c in os.popen(f"pgrep -P {current}").read().split()]
    return out


def cpu(pids: list[int]) -> float:
    """User + system time of these processes and of their children that have exited."""
    return processes_cpu_seconds(pids, children=True)


def postgres_pids() -> list[int]:
    return [int(p) for p in os.popen("pgrep -u postgres postgres").read().split()]


def web_root(url: str) -> int:
    """The gunicorn master serving ``url`` (its workers are its children)."""
    return int(os.popen(f"pgrep -f 'gunicorn delayplatform.wsgi --bind 127.0.0.1:{url.rsplit(':', 1)[1]}'")
               .read().split()[0])


class Split:
    """CPU seconds of each part of the platform between ``start()`` and ``stop()``; a part's
    processes are looked up at both ends (a PostgreSQL backend or a web worker may come and go)."""

    def __init__(self, p, worker_pid: int):
        web, rabbit = web_root(p.url), broker_pid()
        self.groups = {"web (gunicorn)": lambda: tree(web), "worker (relay, loop)": lambda: tree(worker_pid),
                       "PostgreSQL": postgres_pids, "RabbitMQ": lambda: [rabbit]}

    def start(self) -> Split:
        self.pids = {name: find() for name, find in self.groups.items()}
        self.before = {name: cpu(ps) for name, ps in self.pids.items()}
        return self

    def stop(self) -> dict[str, float]:
        pids = {name: sorted(set(self.pids[name]) | set(find())) for name, find in self.groups.items()}
        return {name: cpu(ps) - self.before[name] for name, ps in pids.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="v3")
    parser.add_argument("--case", choices=("rate", "burst"), default="rate")
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--py-spy", metavar="DIR", help="write flame graphs of web and worker here")
    args = parser.parse_args()
    with platform(web_workers=4, settings="delayplatform.settings_test") as p:
        worker = p.start_worker(name="platform", concurrency=2)
        b = Bench(p, quick=False, versions=(args.version,))
        b.warm_up()
        endpoint = b.endpoint(args.case, args.version)
        split = Split(p, worker.process.pid)
        spies = []
        if args.py_spy:
            Path(args.py_spy).mkdir(parents=True, exist_ok=True)
            for label, pid in (("web", web_root(p.url)), ("worker", worker.process.pid)):
                spies.append(subprocess.Popen(
                    [str(Path(sys.executable).parent / "py-spy"), "record", "--subprocesses", "-r", "200", "--format",
                     "raw", "-o", f"{args.py_spy}/{args.case}-{args.version}-{label}.txt", "--pid", str(pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(2)
        rng = random.Random(5)
        delays = [3600.0] * args.messages if args.case == "rate" else [round(rng.uniform(1, 4), 3)
                                                                       for _ in range(args.messages)]
        bodies = b.bodies(endpoint, delays)
        split.start()
        client = time.process_time()  # this process only (pgrep's children are not the load)
        started = time.perf_counter()
        b.post(bodies)
        status = "published" if args.case == "rate" else "delivered"
        wait_until(lambda: b.count(endpoint, status) >= args.messages, 600, 0.05, f"every message {status}")
        wall = time.perf_counter() - started
        used = {**split.stop(), "client": time.process_time() - client}
        for spy in spies:
            spy.send_signal(2)
            spy.wait(60)
    n = args.messages
    print(f"{args.case} on {args.version}: {n:,} messages in {wall:.2f} s ({n / wall:,.0f}/s)")
    total = 0.0
    for name, seconds in used.items():
        total += seconds
        print(f"  {name:<22} {seconds:6.2f} s CPU  {seconds * 1e6 / n:7.0f} µs/message")
    print(f"  {'all':<22} {total:6.2f} s CPU  {total * 1e6 / n:7.0f} µs/message "
          f"({total / wall:.2f} of {os.cpu_count()} cores busy)")
    if args.py_spy:
        for label in ("web", "worker"):
            path = Path(args.py_spy) / f"{args.case}-{args.version}-{label}.txt"
            print(f"\n{label}: busiest functions (share of samples that include them), {path}")
            for share, frame in busiest(path):
                print(f"  {share:5.1%}  {frame}")


def busiest(path: Path, top: int = 25) -> list[tuple[float, str]]:
    """Inclusive share of each function in py-spy's collapsed stacks ("a;b;c count" lines)."""
    counts, total = {}, 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        n = int(n)
        total += n
        for frame in set(stack.split(";")[1:]):  # the first entry names the process/thread
            counts[frame] = counts.get(frame, 0) + n
    return sorted(((c / total, f) for f, c in counts.items()), reverse=True)[:top]


if __name__ == "__main__":
    ARTIFACTS.mkdir(exist_ok=True)
    main()

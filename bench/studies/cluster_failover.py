"""Where delivery pauses when a cluster node dies (issue 22): a timeline of lateness around the kill,
with stack dumps of the worker and the web processes taken while it happens.

    .venv/bin/python -m bench.studies.cluster_failover [--scenario loop-node|rolling] [--per-second 100]

A three-node cluster of its own (harness.rabbit_cluster), a platform on it as make test-cluster
starts it (2 gunicorn workers, one Celery worker with the delivery loop, quorum queues, an
endpoint whose handler is a Celery task, or ``--handler none``), and the API taking
``--per-second`` messages due in 1-15 s. ``loop-node`` kills -9 the node the delivery
loop is connected to; ``rolling`` stops and starts each node in turn. Every second from the fault
on, ``py-spy dump`` of the Celery worker (the loop's thread, Celery's consumer) and of each
gunicorn worker (the relay) goes to artifacts/cluster_failover-stacks.txt.

Prints, per second of due time around the fault: messages due, lateness p50/p99/max, and where
the late ones were late (published late by the relay, or delivered late after reaching the
endpoint's queue), then the worker's warnings. Writes artifacts/cluster_failover.json.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness.paths import ARTIFACTS
from harness.rabbit_cluster import LocalCluster, VhostQueues, cluster_platform
from harness.waiting import wait_until

LATE_SQL = """
    SELECT floor(extract(epoch FROM delivered_at) - %s)::int AS delivered_second, count(*),
           min(delivery_count), max(delivery_count), max(attempts), min(extract(epoch FROM published_at - created_at))::numeric(8,2)
    FROM scheduling_scheduledmessage WHERE lateness_ms > 2000 GROUP BY 1 ORDER BY 1
"""
PY_SPY = str(Path(sys.executable).parent / "py-spy")  # requirements/tools.txt: installed in the venv

TIMELINE_SQL = """
    SELECT floor(extract(epoch FROM due_at))::bigint AS second, count(*),
           percentile_disc(0.5) WITHIN GROUP (ORDER BY lateness_ms),
           percentile_disc(0.99) WITHIN GROUP (ORDER BY lateness_ms), max(lateness_ms),
           max(extract(epoch FROM published_at - due_at) * 1000)::bigint AS published_after_due_ms
    FROM scheduling_scheduledmessage WHERE status = 'delivered' GROUP BY 1 ORDER BY 1
"""


class Load(threading.Thread):
    def __init__(self, p, name: str, per_second: int, chunk: int = 20):
        super().__init__(daemon=True)
        self.p, self.name, self.per_second, self.chunk = p, name, per_second, chunk
        self.scheduled, self.errors, self.stopping = 0, [], threading.Event()

    def run(self):
        rng, next_at = random.Random(3), time.monotonic()
        while not self.stopping.is_set():
            body = {"messages": [{"endpoint": self.name, "payload": {}, "delay_seconds": round(rng.uniform(1, 15), 3)}
                                 for _ in range(self.chunk)]}
            try:
                self.scheduled += len(self.p.api("POST", "/api/messages/bulk/", json=body)["messages"])
            except Exception as exc:  # counted, never retried
                self.errors.append(repr(exc)[:200])
            next_at += self.chunk / self.per_second
            time.sleep(max(0.0, next_at - time.monotonic()))


class Stacks(threading.Thread):
    """py-spy dump of the given processes every second until stopped."""

    def __init__(self, pids: dict[str, int], path):
        super().__init__(daemon=True)
        self.pids, self.path, self.stopping = pids, path, threading.Event()

    def run(self):
        started = time.monotonic()
        with open(self.path, "w") as out:
            while not self.stopping.is_set():
                for role, pid in self.pids.items():
                    dump = subprocess.run([PY_SPY, "dump", "--pid", str(pid)], capture_output=True, text=True,
                                          timeout=30)
                    out.write(f"\n===== t+{time.monotonic() - started:.1f}s {role} pid {pid}\n{dump.stdout}{dump.stderr}")
                    out.flush()
                self.stopping.wait(1)


def gunicorn_workers(master_pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(master_pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def fault(cluster: LocalCluster, p, scenario: str) -> str:
    if scenario == "loop-node":
        (target,) = wait_until(lambda: cluster.connection_nodes(p.vhost, "delivery-loop"), 30, 1, "the loop's connection")
        index = int(target.split("@")[0][len(cluster.name):])
        cluster.kill(index)
        held = []
        for _ in range(4):  # what the quorum queues hold for consumers (dead-letter workers among them) meanwhile
            time.sleep(4)
            held.append({q["name"]: (q.get("messages_dlx"), q.get("messages_unacknowledged"), q.get("leader"))
                         for q in cluster.management.queues(p.vhost) if q.get("messages_dlx") or q.get("messages_unacknowledged")})
        time.sleep(4)
        cluster.restart(index)
        return f"killed {target} (the delivery loop's node); every 4 s after, (dead-lettered, unacked, leader): {held}"
    cluster.rolling_restart(p.vhost)
    return "rolling restart"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=["loop-node", "rolling"], default="loop-node")
    parser.add_argument("--per-second", type=int, default=100)
    parser.add_argument("--handler", choices=["celery_task", "none"], default="celery_task",
                        help="celery_task (a test task per message, as make test-cluster's endpoints) or none")
    args = parser.parse_args()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    stacks_path = ARTIFACTS / "cluster_failover-stacks.txt"
    with LocalCluster(name="dpf", port=5801) as cluster, cluster_platform(cluster) as p:
        name = "failover"
        handler = ({"handler": "celery_task", "handler_target": "testapp.record_receipt"}
                   if args.handler == "celery_task" else {})
        p.api("POST", "/api/endpoints/", json={"name": name, **handler})
        load = Load(p, name, args.per_second)
        load.start()
        time.sleep(8)
        pids = {"celery worker": p.workers[0].process.pid}
        pids.update({f"gunicorn {i}": pid for i, pid in enumerate(gunicorn_workers(p.web_pid))})
        stacks = Stacks(pids, stacks_path)
        fault_at = time.time()
        stacks.start()
        what = fault(cluster, p, args.scenario)
        stacks.stopping.set()
        time.sleep(5)
        load.stopping.set()
        load.join(30)
        try:
            wait_until(lambda: p.sql("SELECT count(*) FROM scheduling_scheduledmessage WHERE status <> 'delivered'")[0][0]
                       == 0, 180, 1, "every message delivered")
        except AssertionError:
            print("NOT ALL DELIVERED:", p.sql("SELECT status, count(*), min(due_at), max(due_at), max(attempts), "
                                              "max(last_error) FROM scheduling_scheduledmessage WHERE status <> "
                                              "'delivered' GROUP BY 1"), "fault at", fault_at)
            print(VhostQueues(cluster, p.vhost).list_queues())
        rows = p.sql(TIMELINE_SQL)
        late = p.sql(LATE_SQL, fault_at)
        warnings = [line for line in p.workers[0].log_text().splitlines() if " WARNING" in line or " ERROR" in line]
    print(f"\n{what}; {load.scheduled} scheduled at {args.per_second}/s, {len(load.errors)} API errors\n")
    print("| due second (from the fault) | messages | lateness p50 | p99 | max | latest publish after due |")
    print("|---|---|---|---|---|---|")
    for second, n, p50, p99, worst, published_after in rows:
        offset = second - int(fault_at)
        if -3 <= offset <= 45:
            print(f"| {offset:+d} | {n} | {p50} ms | {p99} ms | {worst} ms | {published_after} ms |")
    print("\nmessages over 2 s late, by when they were delivered (from the fault):")
    for second, n, min_count, max_count, attempts, publish_s in late:
        print(f"  +{second}s: {n} (delivery_count {min_count}-{max_count}, attempts up to {attempts}, "
              f"published {publish_s} s after scheduling at least)")
    print("\nworker warnings:\n" + "\n".join(warnings[:40]))
    print(f"\nstacks: {stacks_path}")
    (ARTIFACTS / "cluster_failover.json").write_text(json.dumps(
        {"scenario": args.scenario, "fault": what, "fault_at": fault_at, "timeline": rows, "late": late, "warnings": warnings},
        indent=2, default=str))


if __name__ == "__main__":
    main()

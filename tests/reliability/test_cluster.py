"""The platform on a three-node RabbitMQ cluster of the run's own (harness/rabbit_cluster.py):
BROKER_URL lists the three nodes, every queue the platform declares is a quorum queue replicated
on all three, and nodes die under it.

make test runs one node killed mid-delay (v3, reduced); make test-cluster runs every scenario at
full size: a node killed while 5,000 messages of v2 and of v3 are in the cascade and the API
takes more, the node the delivery loop and the relay are connected to killed, a rolling restart
under 200 messages/s, and three workers sharing the endpoints, one of them killed."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pytest

from harness.rabbit_cluster import LocalCluster, VhostQueues, cluster_platform
from harness.waiting import wait_until

from .conftest import FULL, size
from .faults import endpoint, outcome, queue_of, schedule, settle, wait_published, wait_receipts, why_lost

pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.cluster]


def own_cluster() -> LocalCluster:
    """make test-cluster's cluster (nodes dpt1-3, ports 5781-5783), or, in a test process gwN of
    pytest-xdist (make test), one of that process's own (dptwNn1-3, ports 5900+3N...): a make test
    running beside a make test-cluster, or beside another worktree's, must not share its nodes."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.removeprefix("gw").isdigit():
        return LocalCluster()
    n = int(worker.removeprefix("gw"))
    return LocalCluster(name=f"dptw{n}n", port=5900 + 3 * n)


@pytest.fixture(scope="module")
def cluster():
    with own_cluster() as c:
        yield c


class Load:
    """The API taking more while a fault happens: ``per_second`` messages a second, in bulk
    requests of ``chunk``, until stopped. Keeps the ids it was given (201s)."""

    def __init__(self, p, name: str, per_second: int, delays=(2, 10), chunk: int = 20):
        self.p, self.name, self.per_second, self.delays, self.chunk = p, name, per_second, delays, chunk
        self.scheduled, self.errors = 0, []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        import random

        rng, interval, next_at = random.Random(3), self.chunk / self.per_second, time.monotonic()
        while not self.stopping.is_set():
            try:
                self.scheduled += len(schedule(self.p, self.name, [round(rng.uniform(*self.delays), 3)
                                                                   for _ in range(self.chunk)]))
            except Exception as exc:  # an answer other than 201 is counted, never retried
                self.errors.append(repr(exc)[:200])
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.thread.join(60)


def settle_and_count(p, cluster, name: str, total: int, scenario: str, report, timeout: float, note: str = "",
                     once: bool = True):
    """``once``: no handler ran twice. The platform's own hand-over never repeats one (its
    duplicates are suppressed and counted); Celery's may: a handler task whose consumer's
    connection dies before its ack reaches the broker runs again (Celery is at-least-once), as
    may one whose worker is SIGKILLed between handler and commit (docs/operations/reliability.md)."""
    settled = settle(p, name, total, timeout=timeout)
    # A celery_task handler runs in the Celery pool after the delivery is recorded: at 200
    # messages/s two pool processes fall behind, and the tasks wait in the replicated `celery`
    # queue. Give that backlog time to drain (a task that never runs is still counted lost).
    drained = time.monotonic()
    wait_receipts(p, name, timeout=300)
    note = f"{note}; handler backlog drained in {time.monotonic() - drained:.0f} s" if time.monotonic() - drained > 5 \
        else note
    counts = report(outcome(p, name, scenario, note=note))
    assert settled and counts.lost == 0 and counts.messages == total, why_lost(p, name, VhostQueues(cluster, p.vhost))
    assert counts.early == 0
    assert counts.duplicates_to_handler == 0 or not once
    return counts


VERSIONS = ["v2", "v3"] if FULL else ["v3"]
# A node's loss paused deliveries 18-33 s (p99) before issue 22; the target, p99 <= 2 s, is a
# figure the table prints (met in the runs of docs/operations/cluster.md), not a bound to assert
# on a busy 2-core machine. The pause's return fails at this one.
PAUSED_MS = 10_000


@pytest.mark.parametrize("version", VERSIONS)
def test_a_node_killed_mid_delay(cluster, version, report, rng):
    """kill -9 one node (a third of the queue leaders) with messages in every level and the API
    taking more: 0 lost, 0 early, every handler once."""
    with cluster_platform(cluster) as p:
        name = endpoint(p, f"node-killed-{version}", topology=version)
        n, longest = size(5000, 400), (30 if FULL else 15)
        started = time.monotonic()
        schedule(p, name, [round(rng.uniform(5, longest), 3) for _ in range(n)])
        wait_published(p, name, n, timeout=90)
        # the API publishes ~2,000 messages/s to this cluster (bench/studies/cluster_publish.py); make
        # test-cluster once timed out here, read as under 55/s: fail below 100/s at full size
        per_second = n / (time.monotonic() - started)
        assert per_second >= size(100, 20), f"{n} published at {per_second:.0f} messages/s"
        leaders = cluster.leaders(p.vhost)
        with Load(p, name, per_second=size(100, 30)) as load:
            time.sleep(2)
            cluster.kill(3)
            time.sleep(5)
        cluster.restart(3)
        settle_and_count(p, cluster, name, n + load.scheduled, f"cluster: node killed mid-delay, {version}", report,
                         timeout=longest + 120, note=f"{n} in the cascade + {load.scheduled} taken during the kill; "
                                                     f"leaders before {dict(sorted(leaders.items()))}")
        assert not load.errors, load.errors[:3]


@pytest.mark.skipif(not FULL, reason="make test-cluster")
def test_the_node_the_loop_and_relay_use_is_killed(cluster, report, rng):
    """The delivery loop and the web's publisher connect to the first node of BROKER_URL; killing
    it moves both to another node within seconds, and nothing is lost."""
    with cluster_platform(cluster) as p:
        name = endpoint(p, "connected-node-killed")
        n = 2000
        schedule(p, name, [round(rng.uniform(3, 20), 3) for _ in range(n)])
        loop_nodes = wait_until(lambda: cluster.connection_nodes(p.vhost, "delivery-loop"), 30, 1, "the loop's connection")
        (target,) = loop_nodes
        index = int(target.split("@")[0][len(cluster.name):])
        with Load(p, name, per_second=100) as load:
            time.sleep(2)
            killed_at = time.monotonic()
            cluster.kill(index)
            moved = wait_until(lambda: (nodes := cluster.connection_nodes(p.vhost, "delivery-loop")) - {target}
                               and nodes, 60, 0.5, "the delivery loop on another node")
            loop_seconds = time.monotonic() - killed_at
            publisher = wait_until(lambda: cluster.connection_nodes(p.vhost, "publisher") - {target}, 60, 0.5,
                                   "a publisher on another node")
            relay_seconds = time.monotonic() - killed_at
        cluster.restart(index)
        counts = settle_and_count(p, cluster, name, n + load.scheduled, "cluster: the loop's and relay's node killed",
                                  report, timeout=150, once=False, note=f"loop {target} -> {sorted(moved)} in {loop_seconds:.1f} s, publishers on "
                                           f"{sorted(publisher)} by {relay_seconds:.1f} s (management API lag included)")
        assert loop_seconds <= 20 and not load.errors
        assert counts.p99_lateness_ms <= PAUSED_MS, f"p99 {counts.p99_lateness_ms} ms: the node-loss pause is back"


@pytest.mark.skipif(not FULL, reason="make test-cluster")
def test_rolling_restart_under_steady_load(cluster, report):
    """Each node in turn stopped and started again while the API takes 200 messages/s."""
    with cluster_platform(cluster) as p:
        name = endpoint(p, "rolling-restart")
        with Load(p, name, per_second=200, delays=(1, 15)) as load:
            time.sleep(5)
            cluster.rolling_restart(p.vhost)
        counts = settle_and_count(p, cluster, name, load.scheduled, "cluster: rolling restart at 200/s", report,
                                  timeout=150, once=False, note=f"{load.scheduled} scheduled during the restarts")
        assert not load.errors, load.errors[:3]
        assert counts.p99_lateness_ms <= PAUSED_MS, f"p99 {counts.p99_lateness_ms} ms: the node-loss pause is back"


@pytest.mark.skipif(not FULL, reason="make test-cluster")
def test_three_workers_share_endpoints_and_a_dead_one_hands_over(cluster, report, rng):
    """Three workers with delivery loops on the same endpoint: each handler once, the load
    spread (per-worker counts from delivered_by), and SIGKILL of one mid-way loses nothing: what
    it would have delivered after the kill, the other two deliver."""
    with cluster_platform(cluster, workers=3, concurrency=1) as p:
        name = endpoint(p, "three-workers")
        n = 3000
        schedule(p, name, [round(rng.uniform(3, 25), 3) for _ in range(n)])
        time.sleep(10)
        dead = p.workers[0]
        dead.kill()
        (killed_at,) = p.sql("SELECT now()")[0]  # kill() returns once none of its processes runs
        counts = settle_and_count(p, cluster, name, n, "cluster: 3 workers, one SIGKILLed", report, timeout=120,
                                  once=False)
        # delivered_by names the loop: `<worker>@<host>` for the worker's own, `<worker>@<host>/<n>`
        # for each further delivery process (DELAY_DELIVERY_PROCESSES): count per worker
        rows = p.sql(
            "SELECT split_part(m.delivered_by, '/', 1), m.delivered_at > %s, count(*) "
            "FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e ON e.id = m.endpoint_id "
            "WHERE e.name = %s GROUP BY 1, 2", killed_at, name)
        by_worker, after_kill = Counter(), Counter()
        for worker, after, count in rows:
            by_worker[worker] += count
            after_kill[worker] += count if after else 0
        counts.note = "per worker (after the kill): " + ", ".join(
            f"{w.split('@')[0]} {c} ({after_kill[w]})" for w, c in sorted(by_worker.items()))
        print(counts.note)
        assert sum(by_worker.values()) == n and len(by_worker) == 3 and min(by_worker.values()) > 0, counts.note
        (dead_name,) = [w for w in by_worker if w.startswith(f"{dead.name}@")]
        assert after_kill[dead_name] == 0, counts.note
        # its share handed over: the messages due after the kill went to the two others
        assert sum(after_kill.values()) > n // 10, counts.note


DOWN_S = 45  # the killed node stays down this long: every message of STALL_DELAYS falls due meanwhile
STALL_DELAYS = (5, 25)


def overdue_and_stuck(p, cluster, name: str) -> tuple[int, int]:
    """(messages of the endpoint due over 3 s ago and not delivered, messages the level queues
    hold expired and not yet dead-lettered: ``messages_dlx``, the at-least-once worker's backlog)."""
    overdue = p.sql("SELECT count(*) FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e "
                    "ON e.id = m.endpoint_id WHERE e.name = %s AND m.status <> 'delivered' "
                    "AND m.due_at < now() - interval '3 seconds'", name)[0][0]
    try:
        stuck = sum(q.get("messages_dlx") or 0 for q in cluster.management.queues(p.vhost) if ".delay-level-" in q["name"])
    except Exception:  # the management API of a node that just died: the next sample counts
        stuck = 0
    return overdue, stuck


@pytest.mark.skipif(not FULL, reason="make test-cluster")
@pytest.mark.parametrize("rescue", ["rescue", "no rescue"])
def test_dead_letter_stall_while_a_node_stays_down(cluster, report, rng, rescue):
    """The at-least-once dead-letter stall (docs/operations/cluster.md): 3,000 v3 messages in the
    levels, the API taking 100/s, the node leading the endpoint's queue (every level's last hop)
    killed and kept down for 45 s, the rescue on (DELAY_RESCUE_AFTER_MS 1 s) or off (0). Sampled
    every 3 s while it is down: messages overdue by 3 s and not delivered, and the levels'
    dead-letter backlog (``messages_dlx``). On 3.10.8 without the rescue ~3,000 wait for the node;
    on 4.0.5 none do. With the rescue nothing stays overdue on either; 0 lost, 0 early always."""
    settings = {} if rescue == "rescue" else {"DELAY_RESCUE_AFTER_MS": "0"}
    with cluster_platform(cluster, **settings) as p:
        name = endpoint(p, f"stall-{rescue.replace(' ', '-')}", topology="v3")
        n = 3000
        schedule(p, name, [round(rng.uniform(*STALL_DELAYS), 3) for _ in range(n)])
        wait_published(p, name, n, timeout=90)
        # the node leading the endpoint's queue: every level's last hop waits for its confirms
        queue = queue_of(p, name)
        leader = next(q["leader"] for q in cluster.management.queues(p.vhost) if q["name"] == queue)
        index = int(leader.split("@")[0][len(cluster.name):])
        with Load(p, name, per_second=100) as load:
            time.sleep(2)
            cluster.kill(index)
            time.sleep(8)
        down_at, samples = time.monotonic(), []
        while time.monotonic() - down_at < DOWN_S:
            time.sleep(3)
            samples.append(overdue_and_stuck(p, cluster, name))
        # the last samples come after every message fell due: what is overdue then waits for the node
        late_overdue = max(overdue for overdue, _ in samples[-4:])
        cluster.restart(index)
        n += load.scheduled
        note = (f"{cluster.series_name}, {rescue}; node down {DOWN_S} s: most overdue {max(o for o, _ in samples)}, "
                f"overdue in its last 12 s {late_overdue}, most in messages_dlx {max(s for _, s in samples)}")
        settle_and_count(p, cluster, name, n, f"cluster: dead-letter stall, node down {DOWN_S} s, {rescue}",
                         report, timeout=180, note=note, once=False)
        if rescue == "rescue":
            assert late_overdue == 0, note  # the rescue delivered what the broker held back


@pytest.mark.skipif(not FULL, reason="make test-cluster")
def test_verify_checks_every_quorum_queue_has_a_member_on_each_node(cluster):
    """provision_delays --verify on the cluster: leaders spread over the three nodes; a level
    queue that loses a member fails the check, naming the queue."""
    import subprocess
    import sys

    from harness.paths import ROOT

    with cluster_platform(cluster, workers=0) as p:
        verify = [sys.executable, "manage.py", "provision_delays", "--version", "v3", "--verify"]
        ok = subprocess.run(verify, cwd=ROOT, env=p.env, capture_output=True, text=True, timeout=120)
        assert ok.returncode == 0, ok.stderr
        leaders = next(line for line in ok.stdout.splitlines() if "quorum leaders" in line)
        assert all(cluster.node(i) in leaders for i in cluster.nodes), leaders
        queue = "dp.v3.delay-level-05"
        cluster.cli("rabbitmq-queues", "-n", cluster.node(1), "delete_member", "--vhost", p.vhost, queue,
                    cluster.node(2))
        bad = subprocess.run(verify, cwd=ROOT, env=p.env, capture_output=True, text=True, timeout=120)
        assert bad.returncode != 0 and queue in bad.stdout + bad.stderr, bad.stdout + bad.stderr
        assert "Traceback" not in bad.stderr

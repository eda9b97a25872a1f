"""A three-node RabbitMQ cluster of a test run's own (scripts/rabbitmq-cluster.sh under other node
names and ports than `make cluster`'s), with the faults the cluster tests inject. Of the machine's
RabbitMQ, or of 4.0.5 in its Debian 13 root (``series`` 4, or DP_TEST_RABBITMQ=4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from harness.paths import ROOT
from harness.platform import platform
from harness.rabbit_node import host_path, test_series
from harness.vhosts import vhost_create, vhost_delete
from harness.waiting import wait_until
from rabbit import Management, ManagementUnavailable


class LocalCluster:
    def __init__(self, name: str = "dpt", port: int = 5781, nodes: int = 3, series: int | None = None):
        self.name, self.port, self.size = name, port, nodes
        self.series = series or test_series()
        self.dir = Path(f"/tmp/{name}-rabbit-cluster")
        # the nodes' files as this process finds them (inside the root on 4)
        self.hostdir = host_path(self.dir, self.series)
        self.env = {**os.environ, "CLUSTER_NAME": name, "CLUSTER_PORT": str(port), "CLUSTER_NODES": str(nodes),
                    "CLUSTER_DIR": str(self.dir), "CLUSTER_SERIES": str(self.series)}

    def script(self, command: str) -> str:
        result = subprocess.run([str(ROOT / "scripts" / "rabbitmq-cluster.sh"), command], env=self.env,
                                capture_output=True, text=True, timeout=600)
        if result.returncode:
            raise AssertionError(f"rabbitmq-cluster.sh {command} failed: {result.stdout[-1500:]}{result.stderr[-4000:]}")
        return result.stdout

    def __enter__(self) -> LocalCluster:
        try:
            self.script("start")
        except BaseException:  # a node that did start must not outlive the failed start
            subprocess.run([str(ROOT / "scripts" / "rabbitmq-cluster.sh"), "stop"], env=self.env, capture_output=True,
                           timeout=600)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.script("stop")

    @property
    def series_name(self) -> str:
        """The nodes' RabbitMQ version, as the management API reports it."""
        return f"RabbitMQ {self.management.overview().get('rabbitmq_version', '?')}"

    # --- addresses --------------------------------------------------------------------------

    def node(self, i: int) -> str:
        return f"{self.name}{i}@localhost"

    @property
    def nodes(self) -> list[int]:
        return list(range(1, self.size + 1))

    def broker_url(self, vhost: str) -> str:
        return ";".join(f"amqp://guest:guest@127.0.0.1:{self.port + i - 1}/{vhost}" for i in self.nodes)

    @property
    def management_url(self) -> str:
        return ";".join(f"http://guest:guest@127.0.0.1:{self.port + 10000 + i - 1}" for i in self.nodes)

    @property
    def management(self) -> Management:
        return Management(self.management_url)

    # --- faults -------------------------------------------------------------------------------

    def cli(self, program: str, *args: str) -> subprocess.CompletedProcess:
        """A RabbitMQ CLI of the nodes' series (rabbitmq-queues, ...): in the 4.x root on series 4."""
        return subprocess.run([str(ROOT / "scripts" / "rabbitmq-cluster.sh"), "cli", program, *args], env=self.env,
                              capture_output=True, text=True, timeout=180, check=True)

    def _ctl(self, i: int, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([str(ROOT / "scripts" / "rabbitmq-cluster.sh"), "ctl", str(i), *args], env=self.env,
                              capture_output=True, text=True, timeout=180, check=check)

    def running(self, i: int) -> bool:
        return self._ctl(i, "status", check=False).returncode == 0

    def kill(self, i: int) -> None:
        """kill -9 node i: nothing flushed, no connection closed cleanly."""
        pid = int((self.hostdir / f"{self.name}{i}" / "pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not self.running(i), 30, 0.5, f"{self.node(i)} to be gone")

    def restart(self, i: int) -> None:
        """Start what is not running (node i after kill) and wait until it is back in the cluster."""
        self.script("start")
        wait_until(lambda: self.running(i), 60, 0.5, f"{self.node(i)} to run")

    def stop_app(self, i: int) -> None:
        self._ctl(i, "stop_app")

    def start_app(self, i: int) -> None:
        self._ctl(i, "start_app")
        self._ctl(i, "await_startup")

    def rolling_restart(self, vhost: str, down_seconds: float = 5, settle_seconds: float = 3) -> None:
        """Each node in turn stopped and started again, as an upgrade does, the next one only once
        every quorum queue of ``vhost`` has all its members back."""
        for i in self.nodes:
            self.stop_app(i)
            time.sleep(down_seconds)
            self.start_app(i)
            self.wait_replicas_online(vhost)
            time.sleep(settle_seconds)

    def wait_replicas_online(self, vhost: str, timeout: float = 90) -> None:
        """Every quorum queue of the vhost has all its members online again (after a restart)."""
        def online():
            queues = [q for q in self.management.queues(vhost) if q.get("type") == "quorum"]
            return all(len(q.get("online", [])) == self.size for q in queues)

        wait_until(online, timeout, 1, "every quorum queue's members to be online")

    def connection_nodes(self, vhost: str, role: str) -> set[str]:
        """The nodes holding the platform's connections of this role (rabbit.connection_name)."""
        return {c["node"] for c in self.management._request("GET", "/connections") or []
                if c.get("vhost") == vhost
                and role in ((c.get("client_properties") or {}).get("connection_name") or "")}

    def leaders(self, vhost: str) -> dict[str, int]:
        """Quorum queue leaders per node."""
        counts: dict[str, int] = {}
        for q in self.management.queues(vhost):
            if q.get("type") == "quorum" and q.get("leader"):
                counts[q["leader"]] = counts.get(q["leader"], 0) + 1
        return counts


@contextmanager
def cluster_platform(cluster: LocalCluster, workers: int = 1, concurrency: int = 2, **settings):
    """A platform of its own on a vhost of the cluster (``p.vhost``): web, workers, database, every
    queue a quorum queue; ``settings``: more of its environment (DELAY_RESCUE_AFTER_MS="0")."""
    vhost = f"dp-cluster-{uuid.uuid4().hex[:8]}"
    vhost_create(management=cluster.management, vhost=vhost)
    try:
        with platform(web_workers=2, broker_url=cluster.broker_url(vhost), settings="delayplatform.settings_test",
                      RABBITMQ_MANAGEMENT_URL=cluster.management_url, DELAY_QUEUE_TYPE="quorum", **settings) as p:
            p.vhost = vhost
            for _ in range(workers):
                p.start_worker(concurrency=concurrency)
            yield p
    finally:
        try:
            vhost_delete(management=cluster.management, vhost=vhost)
        except ManagementUnavailable as exc:  # a wedged cluster: say so, and let the test's own error show
            print(f"\ncluster_platform: vhost {vhost} not deleted: {exc}", file=sys.stderr)


class VhostQueues:
    """What faults.why_lost asks of a node: the queues of a vhost that hold messages."""

    def __init__(self, cluster: LocalCluster, vhost: str):
        self.cluster, self.vhost = cluster, vhost

    def list_queues(self) -> dict[str, int]:
        depths = self.cluster.management.queue_depths(self.vhost)
        return {name: q.get("messages") for name, q in depths.items() if q.get("messages")}

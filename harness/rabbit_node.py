"""A RabbitMQ node of a run's own, beside the shared broker: for settings the shared one must not
take (a short consumer_timeout), and for faults (stopping, crashing, restarting the node). Of the
machine's RabbitMQ (3.10.8 here), or of RabbitMQ 4.0.5 in its Debian 13 root (scripts/rabbitmq4.sh):
``series`` 4, or the environment's DP_TEST_RABBITMQ=4 (make test-rabbitmq4)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from harness.paths import ROOT
from harness.waiting import wait_until

RABBITMQ4 = ROOT / "scripts" / "rabbitmq4.sh"


def test_series() -> int:
    """The RabbitMQ series a test run uses: 3 (the machine's) unless DP_TEST_RABBITMQ says 4."""
    return 4 if os.environ.get("DP_TEST_RABBITMQ", "3").strip() == "4" else 3


def rabbitmq4_root() -> Path:
    """Where RabbitMQ 4's root is (built by scripts/rabbitmq4.sh root)."""
    return Path(os.environ.get("RABBITMQ4_ROOT", "/var/cache/dp/rabbitmq4-root"))


def host_path(path: Path, series: int) -> Path:
    """A node's ``path`` as this process finds it: inside RabbitMQ 4's root on series 4."""
    return rabbitmq4_root() / path.relative_to("/") if series == 4 else path


class PrivateRabbit:
    """A RabbitMQ node of a test's own (another node name and port), for settings that must not
    touch the shared broker, such as a short consumer_timeout, or for stopping it. No plugins,
    unless ``management_port`` is given: then the management plugin listens there
    (``management_url``), for what reads the broker through it (verify, /metrics, the soak)."""

    def __init__(self, port: int = 5699, consumer_timeout_ms: int | None = None, management_port: int | None = None,
                 channel_tick_ms: int | None = None, series: int | None = None):
        import uuid

        self.series = series or test_series()
        self.port, self.node = port, f"dp{uuid.uuid4().hex[:6]}@localhost"
        # the node's files as it sees them, and as this process finds them (inside the root on 4)
        self.inner = Path(f"/tmp/{self.node.split('@')[0]}")
        self.base = host_path(self.inner, self.series)
        self.url = f"amqp://guest:guest@127.0.0.1:{port}//"
        self.config = [f"listeners.tcp.local = 127.0.0.1:{port}", "loopback_users = none"]
        if consumer_timeout_ms is not None:
            self.config.append(f"consumer_timeout = {consumer_timeout_ms}")
        # as docs/operations/reliability.md recommends for v2/v3: unconfirmed dead-letters re-sent after 5 s,
        # not 180 s (a restart mid-dead-letter otherwise parks a whole level for three minutes)
        self.advanced = ["{dead_letter_worker_publisher_confirm_timeout, 5000}"]
        # how often each channel checks its consumers' timeout (RabbitMQ's default: once a minute)
        if channel_tick_ms is not None:
            self.advanced.append(f"{{channel_tick_interval, {channel_tick_ms}}}")
        self.plugins = "[]"
        self.management_url = None
        if management_port is not None:
            self.plugins = "[rabbitmq_management]"
            self.config += [f"management.tcp.port = {management_port}", "management.tcp.ip = 127.0.0.1"]
            self.management_url = f"http://guest:guest@127.0.0.1:{management_port}"

    def _env(self) -> dict:
        return {**os.environ, "RABBITMQ_NODENAME": self.node, "RABBITMQ_NODE_PORT": str(self.port),
                "RABBITMQ_DIST_PORT": str(self.port + 20000), "RABBITMQ_CONFIG_FILE": str(self.inner / "rabbitmq"),
                "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.inner / "advanced.config"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.inner / "enabled_plugins"),
                "RABBITMQ_MNESIA_BASE": str(self.inner / "mnesia"), "RABBITMQ_LOG_BASE": str(self.inner / "log"),
                "RABBITMQ_PID_FILE": str(self.inner / "pid")}

    def command(self, program: str, *args: str) -> list[str]:
        """A RabbitMQ program of this node's series (4: in its root, through scripts/rabbitmq4.sh)."""
        return [str(RABBITMQ4), "run", program, *args] if self.series == 4 else [program, *args]

    def rabbitmqctl(self, *args: str) -> list[str]:
        return self.command("rabbitmqctl", "-q", "-n", self.node, *args)

    def _start(self) -> None:
        subprocess.run(self.command("rabbitmq-server", "-detached"), env=self._env(), check=True, capture_output=True)

    def __enter__(self) -> PrivateRabbit:
        import shutil

        if self.series == 4:
            subprocess.run([str(RABBITMQ4), "root"], check=True, capture_output=True, timeout=600)
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "rabbitmq.conf").write_text("\n".join(self.config) + "\n")
        (self.base / "enabled_plugins").write_text(f"{self.plugins}.\n")
        (self.base / "advanced.config").write_text(
            f"[{{rabbit, [{', '.join(self.advanced)}]}}].\n")
        if self.series == 4:  # the root's own rabbitmq user
            subprocess.run(self.command("chown", "-R", "rabbitmq:rabbitmq", str(self.inner)), check=True)
        else:
            shutil.chown(self.base, "rabbitmq", "rabbitmq")
            for child in self.base.iterdir():
                shutil.chown(child, "rabbitmq", "rabbitmq")
        self._start()
        self._await_ready(60, f"private RabbitMQ node {self.node}")
        return self

    def listening(self) -> bool:
        """The node's AMQP port accepts connections (its listeners start last, once it has booted)."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def accepts_amqp(self) -> bool:
        """An AMQP connection opens (the platform's readiness probe): a listening 4.0.5 node has been
        seen to let its first client's handshake time out while it finished booting."""
        from rabbit import Broker, BrokerUnavailable

        try:
            Broker(self.url).probe(timeout=2.0)
        except BrokerUnavailable:
            return False
        return True

    def _await_ready(self, timeout: float, what: str) -> None:
        """Until the node listens (polled on its port, not with ``rabbitmqctl status``: each call
        boots an Erlang VM, ~0.4 s of CPU, twenty a start, taken from the booting node), has booted
        (``await_startup``) and takes an AMQP connection."""
        wait_until(self.listening, timeout, 0.2, what)
        self.ctl("await_startup")
        wait_until(self.accepts_amqp, 30, 0.2, f"{what} to take an AMQP connection")

    def __exit__(self, *exc) -> None:
        import shutil

        # with the pid file, stop returns once the node's process is gone: removing its directory
        # any earlier left the files it wrote while stopping (a /tmp/dp<hex> per node)
        pid_file = [str(self.inner / "pid")] if (self.base / "pid").exists() else []
        subprocess.run(self.rabbitmqctl("stop", *pid_file), capture_output=True, timeout=60)
        shutil.rmtree(self.base, ignore_errors=True)

    def ctl(self, *args: str) -> None:
        subprocess.run(self.rabbitmqctl(*args), check=True, capture_output=True, timeout=120)

    def stop_app(self) -> None:
        self.ctl("stop_app")

    def list_queues(self) -> dict[str, int]:
        """Queues that hold messages, by name (for a failing test's message)."""
        out = subprocess.run(self.rabbitmqctl("list_queues", "name", "messages", "--no-table-headers"),
                             capture_output=True, text=True, timeout=60).stdout
        return {name: int(n) for name, n in (line.split("\t") for line in out.splitlines() if "\t" in line) if n != "0"}

    def start_app(self) -> None:
        self.ctl("start_app")
        self.ctl("await_startup")

    def pid(self) -> int:
        """The node's Erlang VM (a chroot shares the machine's process ids): its CPU for benchmarks."""
        return int((self.base / "pid").read_text().strip())

    def crash(self) -> None:
        """kill -9 the node: an unclean shutdown, nothing flushed or closed."""
        os.kill(self.pid(), signal.SIGKILL)
        wait_until(lambda: subprocess.run(self.rabbitmqctl("status"), capture_output=True)
                   .returncode != 0, 30, 0.5, "the node to be gone")

    def stop(self) -> None:
        """A clean stop of the whole node (its data kept): ``restart()`` brings it back."""
        self.ctl("stop")

    def restart(self) -> None:
        self._start()
        self._await_ready(90, f"private RabbitMQ node {self.node} to restart")

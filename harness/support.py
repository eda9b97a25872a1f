"""Helpers shared by tests and benchmarks: polling, a recording HTTP server, a real worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"


def wait_until(predicate, timeout: float, interval: float = 0.1, message: str = "condition"):
    """Poll until predicate() is truthy; return its value or fail with the message."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class RecordingServer:
    """A local HTTP server that records every POST; ``fail_first`` answers 500 that many times;
    ``answer`` (status, headers) replaces the 200 (a redirect, say)."""

    def __init__(self, fail_first: int = 0, answer: tuple[int, dict] = (200, {})):
        self.requests: list[dict] = []
        self.fail_first = fail_first
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with lock:
                    recorder.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    failing = recorder.fail_first > 0
                    recorder.fail_first -= 1 if failing else 0
                status, headers = (500, {}) if failing else answer
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()

            def log_message(self, *args):
                pass

        lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list:
        return [json.loads(r["body"]) for r in self.requests]


def database_url(settings_dict: dict) -> str:
    user, password = settings_dict.get("USER") or "postgres", settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{password}" if password else user
    return f"postgres://{auth}@{settings_dict.get('HOST') or '127.0.0.1'}:{settings_dict.get('PORT') or 5432}/{settings_dict['NAME']}"


class Worker:
    """A real ``celery worker`` process (with beat) on this run's vhost and database."""

    def __init__(self, name: str, env: dict, log_path: Path, concurrency: int = 2, beat: bool = True,
                 extra_args: tuple = (), app: str = "delayplatform"):
        self.name, self.env, self.log_path = name, env, log_path
        self.args = [sys.executable, "-m", "celery", "-A", app, "worker", "-n", f"{name}@%h",
                     "-l", "INFO", "-c", str(concurrency), "--without-gossip", "--without-mingle",
                     *(("--beat", "-s", str(log_path.with_suffix(".beat"))) if beat else ()), *extra_args]
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> Worker:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        log.close()

        def ready():
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited with {self.process.returncode}; see {self.log_path}")
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                return b" ready." in fh.read()

        wait_until(ready, timeout, 0.2, f"worker {self.name} to be ready")
        return self

    def stop(self, timeout: float = 30) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def kill(self) -> None:
        """SIGKILL the whole worker (main process and pool): nothing gets to clean up."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class PrivateRabbit:
    """A RabbitMQ node of a test's own (another node name and port), for settings that must not
    touch the shared broker, such as a short consumer_timeout, or for stopping it. No plugins,
    unless ``management_port`` is given: then the management plugin listens there
    (``management_url``), for what reads the broker through it (verify, /metrics, the soak)."""

    def __init__(self, port: int = 5699, consumer_timeout_ms: int | None = None, management_port: int | None = None):
        import uuid

        self.port, self.node = port, f"dp{uuid.uuid4().hex[:6]}@localhost"
        self.base = Path(f"/tmp/{self.node.split('@')[0]}")
        self.url = f"amqp://guest:guest@127.0.0.1:{port}//"
        self.config = [f"listeners.tcp.local = 127.0.0.1:{port}", "loopback_users = none"]
        if consumer_timeout_ms is not None:
            self.config.append(f"consumer_timeout = {consumer_timeout_ms}")
        self.plugins = "[]"
        self.management_url = None
        if management_port is not None:
            self.plugins = "[rabbitmq_management]"
            self.config += [f"management.tcp.port = {management_port}", "management.tcp.ip = 127.0.0.1"]
            self.management_url = f"http://guest:guest@127.0.0.1:{management_port}"

    def _env(self) -> dict:
        return {**os.environ, "RABBITMQ_NODENAME": self.node, "RABBITMQ_NODE_PORT": str(self.port),
                "RABBITMQ_DIST_PORT": str(self.port + 20000), "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq"),
                "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.base / "advanced.config"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
                "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"), "RABBITMQ_LOG_BASE": str(self.base / "log"),
                "RABBITMQ_PID_FILE": str(self.base / "pid")}

    def __enter__(self) -> PrivateRabbit:
        import shutil

        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "rabbitmq.conf").write_text("\n".join(self.config) + "\n")
        (self.base / "enabled_plugins").write_text(f"{self.plugins}.\n")
        # as docs/reliability.md recommends for v2/v3: unconfirmed dead-letters re-sent after 5 s,
        # not 180 s (a restart mid-dead-letter otherwise parks a whole level for three minutes)
        (self.base / "advanced.config").write_text(
            "[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 5000}]}].\n")
        shutil.chown(self.base, "rabbitmq", "rabbitmq")
        for child in self.base.iterdir():
            shutil.chown(child, "rabbitmq", "rabbitmq")
        subprocess.run(["rabbitmq-server", "-detached"], env=self._env(), check=True, capture_output=True)
        wait_until(lambda: subprocess.run(["rabbitmqctl", "-q", "-n", self.node, "status"], capture_output=True)
                   .returncode == 0, 60, 0.5, f"private RabbitMQ node {self.node}")
        subprocess.run(["rabbitmqctl", "-q", "-n", self.node, "await_startup"], check=True, capture_output=True)
        return self

    def __exit__(self, *exc) -> None:
        import shutil

        subprocess.run(["rabbitmqctl", "-q", "-n", self.node, "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.base, ignore_errors=True)

    def ctl(self, *args: str) -> None:
        subprocess.run(["rabbitmqctl", "-q", "-n", self.node, *args], check=True, capture_output=True, timeout=120)

    def stop_app(self) -> None:
        self.ctl("stop_app")

    def list_queues(self) -> dict[str, int]:
        """Queues that hold messages, by name (for a failing test's message)."""
        out = subprocess.run(["rabbitmqctl", "-q", "-n", self.node, "list_queues", "name", "messages", "--no-table-headers"],
                             capture_output=True, text=True, timeout=60).stdout
        return {name: int(n) for name, n in (line.split("\t") for line in out.splitlines() if "\t" in line) if n != "0"}

    def start_app(self) -> None:
        self.ctl("start_app")
        self.ctl("await_startup")

    def crash(self) -> None:
        """kill -9 the node: an unclean shutdown, nothing flushed or closed."""
        pid = int((self.base / "pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: subprocess.run(["rabbitmqctl", "-q", "-n", self.node, "status"], capture_output=True)
                   .returncode != 0, 30, 0.5, "the node to be gone")

    def stop(self) -> None:
        """A clean stop of the whole node (its data kept): ``restart()`` brings it back."""
        self.ctl("stop")

    def restart(self) -> None:
        subprocess.run(["rabbitmq-server", "-detached"], env=self._env(), check=True, capture_output=True)
        wait_until(lambda: subprocess.run(["rabbitmqctl", "-q", "-n", self.node, "status"], capture_output=True)
                   .returncode == 0, 90, 0.5, f"private RabbitMQ node {self.node} to restart")
        self.ctl("await_startup")


def bind_endpoint(session, version, name: str) -> str:
    """Declare an endpoint's queue and bind it on a cascade's delivery exchange (session: a
    rabbit.Session; version: a topology.cascade.Version)."""
    from topology import cascade

    session.declare_queue(cascade.endpoint_queue(name))
    session.bind(cascade.endpoint_binding(version, name))
    return name


def celery_drained(queue: str = "celery", timeout: float = 30) -> None:
    """Wait until no task of ``queue`` is waiting or running anywhere: the queue is empty (AMQP,
    not the management API's lagging figures) and every worker answers that it holds no active
    or reserved task. After that, counting a handler's runs gives a final answer."""
    from delayplatform.celery import app
    from scheduling.conf import broker

    def idle() -> bool:
        with broker().session() as session:
            if session.queue_depth(queue):
                return False
        inspect = app.control.inspect(timeout=1)
        active, reserved = inspect.active(), inspect.reserved()
        if active is None or reserved is None:  # no worker answered: cannot tell
            return False
        return not any(active.values()) and not any(reserved.values())

    wait_until(idle, timeout, 0.2, f"the {queue} queue to drain")

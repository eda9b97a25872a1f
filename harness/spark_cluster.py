"""A Spark standalone cluster of one master and one worker on 127.0.0.1, started from the
installed PySpark (its package directory is a SPARK_HOME: bin/spark-class and jars/), for tests
that run the accuracy report on ``spark://`` instead of ``local[*]``.

    with StandaloneCluster(tmp_dir) as cluster:
        cluster.master_url      # spark://127.0.0.1:<port>
        cluster.state()         # the master's web UI JSON: workers, active and completed apps

Each process runs in a session of its own (the worker's executors too), so stopping sends SIGTERM
to the whole group, then SIGKILL after a grace period. Logs, work and scratch directories live
under the directory given, which the caller removes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from harness.ports import free_ports
from harness.waiting import wait_until


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    def __init__(self, base: Path, *, cores: int = 1, memory: str = "1g", startup_timeout: float = 90):
        self.base = Path(base)
        self.cores, self.memory, self.startup_timeout = cores, memory, startup_timeout
        self.port, self.webui_port, self.worker_webui_port = free_ports(3)
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.webui_url = f"http://127.0.0.1:{self.webui_port}"
        self.processes: dict[str, subprocess.Popen] = {}

    def _env(self) -> dict:
        conf_dir = self.base / "conf"  # empty: no spark-defaults.conf or spark-env.sh of the machine
        conf_dir.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(conf_dir),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.base / "local"),
            "SPARK_LOG_DIR": str(self.base / "logs"),
            "SPARK_WORKER_DIR": str(self.base / "work"),
        }

    def _start(self, name: str, *args: str) -> None:
        log_path = self.base / "logs" / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self.processes[name] = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                env=self._env(),
                cwd=self.base,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def start(self) -> StandaloneCluster:
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui_port),
        )  # fmt: skip
        self._start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            self.master_url,
            "--host", "127.0.0.1", "--webui-port", str(self.worker_webui_port),
            "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(self.base / "work"),
        )  # fmt: skip
        try:
            wait_until(self._worker_alive, self.startup_timeout, 0.5, "a Spark worker registered")
        except BaseException:
            self.stop()
            raise
        return self

    def _worker_alive(self) -> bool:
        for name, process in self.processes.items():
            if process.poll() is not None:
                tail = self.log(name)[-3000:]
                raise AssertionError(f"Spark {name} exited with {process.returncode}:\n{tail}")
        try:
            return self.state().get("aliveworkers", 0) >= 1
        except (OSError, ValueError):  # the master's web UI is not listening yet, or answers empty
            return False

    def state(self) -> dict:
        """The master's status as its web UI serves it at /json/."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as response:
            return json.load(response)

    def log(self, name: str) -> str:
        path = self.base / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, grace: float = 20) -> None:
        """Worker first (it stops its executors), then the master: SIGTERM to each process group,
        SIGKILL to whatever of the group is left after ``grace`` seconds."""
        for name in ("worker", "master"):
            process = self.processes.pop(name, None)
            if process is None:
                continue
            _signal_group(process.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                pass
            if not _group_gone(process.pid, deadline):
                _signal_group(process.pid, signal.SIGKILL)  # a JVM that hung, or executors left behind
                process.wait()
                _group_gone(process.pid, time.monotonic() + 10)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_gone(pgid: int, deadline: float) -> bool:
    """Wait until no process of the group is left (an unreaped leader counts: wait() it first)."""
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)

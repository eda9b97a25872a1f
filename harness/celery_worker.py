"""Real ``celery worker`` processes, started and stopped as the deployment does, and waiting until
no task is left anywhere: for the end-to-end tests, the reliability tests and the benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.paths import ARTIFACTS, ROOT
from harness.waiting import wait_until


@dataclass
class WorkerStarts:
    """How many worker processes this test process has started: tests/conftest.py drops what a
    module's workers leave behind only after a module that started one."""

    count: int = 0


WORKER_STARTS = WorkerStarts()


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
        WORKER_STARTS.count += 1

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
        """SIGKILL the whole worker (main process, pool, embedded beat): nothing gets to clean up.
        Returns once no process of its group runs any more: a signal reaches the others
        asynchronously, and one still on a core could make a call or commit a write after the
        main process is reaped."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            wait_until(lambda: not group_running(self.process.pid), 30, 0.01, f"worker {self.name}'s processes to end")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def group_running(pgid: int) -> bool:
    """Whether a process of this process group still runs (a zombie, killed and waiting for its
    reaper, does not)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def start_workers(label: str, env: dict, count: int) -> list[Worker]:
    """``count`` workers (each with beat) named ``<label><n>-<run id>``, logging to the artifacts:
    several workers at once (two beats racing, two loops sharing a limit)."""
    run_id = os.environ["DP_TEST_RUN_ID"]
    return [Worker(f"{label}{n}-{run_id}", env, ARTIFACTS / f"worker-{run_id}-{label}-{n}.log").start()
            for n in range(count)]


def celery_drained(queue: str = "celery", timeout: float = 30) -> None:
    """Wait until no task of ``queue`` is waiting or running anywhere: the queue is empty (AMQP,
    not the management API's lagging figures) and every worker answers that it holds no active
    or reserved task. After that, counting a handler's runs gives a final answer."""
    from delayplatform.celery import app
    from scheduling.config.conf import broker

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

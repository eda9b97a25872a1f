"""A release of the platform as its own processes: the previous one (the commit pyproject.toml
names) unpacked from git into a directory with a virtualenv of its own, or the working tree on the
test's interpreter; its manage.py, gunicorn, Celery worker and beat, each a process group of its
own, logging to artifacts/."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import requests

from harness.paths import ARTIFACTS, ROOT
from harness.waiting import wait_until


def previous_release_commit() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["delayplatform"]["previous-release"]["commit"]


def unpack(commit: str, into: Path) -> None:
    """The commit's tree (``git archive``: what a release tarball holds) into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(["git", "archive", "--format=tar", commit], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    assert archive.wait() == 0, f"git archive {commit} failed: is it in this clone? (git fetch --unshallow)"


def virtualenv(root: Path) -> Path:
    """A virtualenv in ``root`` with the release's runtime requirements (what its image installs);
    its python. Quick where pip's cache holds the wheels (docs/operations/upgrades.md)."""
    venv = root / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # the test's pip installs into the new environment (no second copy of pip to bootstrap)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                           "--disable-pip-version-check", "-r", str(root / "requirements" / "runtime.txt")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin" / "python"


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM to the group (gunicorn and Celery's warm shutdown: what is running finishes),
        SIGKILL after ``timeout``."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()


@dataclass
class Release:
    """``label`` names its logs; ``root`` is its tree, ``python`` the interpreter that runs it."""

    label: str
    root: Path
    python: str
    run_id: str
    processes: list[Process] = field(default_factory=list)

    def manage(self, env: dict, *args: str, timeout: float = 600) -> str:
        done = subprocess.run([self.python, "manage.py", *args], cwd=self.root, env=env, capture_output=True,
                              text=True, timeout=timeout)
        assert done.returncode == 0, f"{self.label}: manage.py {' '.join(args)}: {done.stderr[-3000:]}"
        return done.stdout

    def _start(self, name: str, env: dict, *args: str) -> Process:
        ARTIFACTS.mkdir(exist_ok=True)
        log = ARTIFACTS / f"upgrade-{self.run_id}-{self.label}-{name}.log"
        with open(log, "ab") as out:
            popen = subprocess.Popen([self.python, "-m", *args], cwd=self.root, env=env, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        process = Process(f"{self.label} {name}", popen, log)
        self.processes.append(process)
        return process

    def _ready(self, process: Process, ready, timeout: float = 120) -> Process:
        def up():
            assert process.popen.poll() is None, f"{process.name} exited: {process.log_text()[-3000:]}"
            return ready()

        wait_until(up, timeout, 0.2, f"{process.name} to start")
        return process

    def web(self, env: dict, port: int) -> Process:
        process = self._start("web", env, "gunicorn", "delayplatform.wsgi", "--bind", f"127.0.0.1:{port}",
                              "--workers", "2", "--timeout", "120", "--graceful-timeout", "30",
                              "--log-level", "warning")

        def answers():
            try:
                return requests.get(f"http://127.0.0.1:{port}/api/", timeout=2).status_code == 401
            except requests.RequestException:
                return False

        return self._ready(process, answers)

    def worker(self, env: dict, name: str = "") -> Process:
        """A worker named ``name`` (the release's label by default)."""
        name = name or self.label
        process = self._start(f"worker-{name}", env, "celery", "-A", "delayplatform", "worker", "-n",
                              f"{name}-{self.run_id}@%h", "-l", "INFO", "-c", "2", "--without-gossip",
                              "--without-mingle")
        return self._ready(process, lambda: " ready." in process.log_text())

    def beat(self, env: dict) -> Process:
        schedule = ARTIFACTS / f"upgrade-{self.run_id}-{self.label}.beat"
        process = self._start("beat", env, "celery", "-A", "delayplatform", "beat", "-l", "INFO", "-s", str(schedule))
        return self._ready(process, lambda: "beat: Starting" in process.log_text())

    def stop_all(self) -> None:
        """Every process it started, whatever happens to one of them (none may outlive the test)."""
        for process in reversed(self.processes):
            try:
                process.stop(timeout=30)
            except Exception:  # noqa: BLE001  (gone already, or unkillable: the others still stop)
                pass


def timed(function, *args, **kwargs):
    """(what ``function`` returned, the seconds it took)."""
    started = time.perf_counter()
    value = function(*args, **kwargs)
    return value, time.perf_counter() - started

"""The platform deployed for the soak as `make run` deploys it (scripts/run.sh): gunicorn with
gunicorn.conf.py and two workers, one `celery -A delayplatform worker --beat`, the production
settings module with a SECRET_KEY and DEBUG off, the cascades provisioned with
`provision_delays --version all`. What differs is what the soak must be able to break or remove:
a RabbitMQ node of its own (it is stopped and started mid-run), a PostgreSQL server of its own with
stock settings (tests/reliability/soak/postgres.py says why), and the archive in a directory of its own.
Everything is removed on exit, on failure and on Ctrl-C."""

from __future__ import annotations

import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
import requests

from harness.celery_worker import Worker
from harness.paths import ARTIFACTS, ROOT
from harness.platform import manage, team_with_key
from harness.ports import free_port
from harness.rabbit_node import PrivateRabbit
from harness.waiting import wait_until
from scheduling.core.durations import format_duration
from tests.reliability.soak.load import BULK_MAX
from tests.reliability.soak.postgres import PrivatePostgres
from tests.reliability.soak.rules import Plan

LOG_TAIL_BYTES = 4 << 20  # of each log, kept in artifacts/ when the run fails or misses a target

ENDPOINTS = 4
WEB_WORKERS = 2  # scripts/run.sh's default
# Variables of the platform (docs/reference/configuration.md) and of the test settings: the soak sets
# its own and must not inherit the caller's (a .env, or pytest's settings_test defaults such as DELAY_API_RATE=off).
PLATFORM_PREFIXES = ("DELAY_", "ACCURACY_", "LOG_", "DJANGO_", "CELERY_", "DB_", "SPARK_", "DP_TEST", "TEST_DB")
PLATFORM_NAMES = {"SECRET_KEY", "DEBUG", "DATABASE_URL", "BROKER_URL", "RABBITMQ_MANAGEMENT_URL", "ALLOWED_HOSTS",
                  "CSRF_TRUSTED_ORIGINS", "ENV_FILE"}


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def node_ports() -> tuple[int, int]:
    """(AMQP, management) for a private node: PrivateRabbit also takes AMQP + 20000 for Erlang's
    distribution; management is AMQP + 10000."""
    for port in random.sample(range(5600, 5690), 90):
        if all(port_free(p) for p in (port, port + 10000, port + 20000)):
            return port, port + 10000
    raise RuntimeError("no free port for a private RabbitMQ node between 5600 and 5690")


def platform_env(plan: Plan, *, database_url: str, node: PrivateRabbit, workdir: Path, metrics_port: int) -> dict:
    """The environment of every process of the platform: production settings, the soak's retention."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(PLATFORM_PREFIXES) and k not in PLATFORM_NAMES}
    retention = format_duration(timedelta(seconds=plan.retention_s))
    prune_every = format_duration(timedelta(seconds=plan.prune_every_s))
    api_rate = 2 * max(plan.rate, BULK_MAX)
    settings = {
        "DJANGO_SETTINGS_MODULE": "delayplatform.settings",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": database_url,
        "BROKER_URL": node.url,
        "RABBITMQ_MANAGEMENT_URL": node.management_url,
        "DELAY_RETENTION": retention,
        "DELAY_FAILED_RETENTION": retention,
        "DELAY_PRUNE_EVERY": prune_every,
        "DELAY_ARCHIVE_DIR": str(workdir / "archive"),
        "ACCURACY_REPORT_DIR": str(workdir / "accuracy"),
        "ACCURACY_REPORT_AT": "off",  # the nightly Spark job is not what is soaked (and would take both cores)
        # the API's limits per user, team and key (default 5,000 a second each) at twice the soak's own
        # rate, whatever that is, with room for a catching-up bulk request: one key of one team sends it
        # all. Per second, not per minute: the throttle leases a process 1/60 of the rate at a time, and
        # a per-minute lease (a second's worth of a minute's budget) that a request every 0.2 s across
        # two web workers leaves mostly unspent counts as spent, so 200/s against "24000/minute" was
        # refused half the time (429s, the load at ~112/s, the table's live rows swinging with it)
        "DELAY_API_RATE": f"{api_rate}/second",
        "DELAY_TEAM_API_RATE": f"{api_rate}/second",
        "DELAY_KEY_API_RATE": f"{api_rate}/second",
        "DELAY_WORKER_METRICS_PORT": str(metrics_port),
    }
    env_file = workdir / "soak.env"  # the settings, for the record (as make run's .env)
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items() if k != "SECRET_KEY"))
    # what a SIGKILLed process leaves in the temporary directory (a worker's metrics directory) goes
    # with the run's own directory
    (workdir / "tmp").mkdir()
    return {**base, **settings, "ENV_FILE": str(env_file), "TMPDIR": str(workdir / "tmp")}


@dataclass
class Deployment:
    run_id: str
    workdir: Path
    env: dict
    url: str
    key: str  # the API key of the soak's team
    node: PrivateRabbit
    worker: Worker
    web: subprocess.Popen
    database_url: str
    archive_dir: Path
    endpoints: list[str]

    def kill_worker(self) -> float:
        """SIGKILL the worker's whole process group (main process, pool, embedded beat), start it
        again as before; the seconds until it is ready."""
        started = time.monotonic()
        self.worker.kill()
        self.worker.start(timeout=120)
        return time.monotonic() - started

    def restart_broker(self) -> float:
        """Stop the RabbitMQ node and start it again (data kept); the seconds it was away."""
        started = time.monotonic()
        self.node.stop()
        self.node.restart()
        return time.monotonic() - started


def _quietly(step):
    """A cleanup step that must not stop the others."""
    def run(*_):
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - reported, the rest of the cleanup goes on
            print(f"soak: cleanup: {exc}", file=sys.stderr)
    return run


def _terminate(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def keep_logs(workdir: Path, run_id: str, say=print) -> None:
    """The tail of each log in artifacts/ (the run's directory is removed with everything else)."""
    kept = []
    for name in ("worker.log", "web.log", "postgres/server.log"):
        source = workdir / name
        if source.exists():
            ARTIFACTS.mkdir(exist_ok=True)
            target = ARTIFACTS / f"soak-{run_id}-{source.name}"
            with open(source, "rb") as fh:
                fh.seek(max(0, source.stat().st_size - LOG_TAIL_BYTES))
                target.write_bytes(fh.read())
            kept.append(str(target))
    if kept:
        say(f"soak: the logs' last {LOG_TAIL_BYTES >> 20} MB: {', '.join(kept)}")


class _Shield:
    """Ctrl-C and SIGTERM ignored while the cleanup runs (a second Ctrl-C would leave a node or a
    server behind), then as before. Signals can be set in the main thread only."""

    def __init__(self):
        self.saved = {}

    def up(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}

    def down(self) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


@contextmanager
def deployed(plan: Plan, run_id: str, say=print):
    workdir = Path(f"/tmp/dp-soak-{run_id}")
    bin_dir = Path(sys.executable).parent
    shield = _Shield()
    try:
        with ExitStack() as stack:
            workdir.mkdir(parents=True)
            stack.callback(_quietly(lambda: shutil.rmtree(workdir, ignore_errors=True)))
            try:
                yield from _deploy(plan, run_id, workdir, bin_dir, stack, say)
            except BaseException:
                keep_logs(workdir, run_id, say)
                raise
            finally:
                shield.up()
                say("soak: stopping and removing what it started")
    finally:
        shield.down()


def _deploy(plan: Plan, run_id: str, workdir: Path, bin_dir: Path, stack: ExitStack, say):
    amqp_port, management_port = node_ports()
    node = PrivateRabbit(port=amqp_port, management_port=management_port)
    say(f"soak: starting RabbitMQ node {node.node} (AMQP {amqp_port}, management {management_port})")
    starting = ThreadPoolExecutor(1).submit(node.__enter__)  # while PostgreSQL starts and migrate runs

    def stop_node():
        wait([starting])  # a node still starting would come up after being stopped
        node.__exit__(None, None, None)

    stack.callback(_quietly(stop_node))  # also when starting it failed
    tuned = {} if plan.autovacuum_naptime_s == 60 else {"autovacuum_naptime": f"'{plan.autovacuum_naptime_s:g}s'"}
    pg = PrivatePostgres(workdir / "postgres", free_port(), tuned)
    stack.callback(_quietly(lambda: pg.__exit__(None, None, None)))
    say(f"soak: starting PostgreSQL on port {pg.port} (stock settings, autovacuum on"
        + "".join(f", {k} {v}" for k, v in tuned.items()) + ")")
    pg.__enter__()
    with psycopg.connect(f"{pg.url}/postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE delayplatform")
    database_url = f"{pg.url}/delayplatform"
    env = platform_env(plan, database_url=database_url, node=node, workdir=workdir, metrics_port=free_port())
    say("soak: migrate, provision_delays --version all, a team and its API key")
    manage(env, "migrate", "--noinput")
    starting.result()
    manage(env, "provision_delays", "--version", "all")
    key = team_with_key(env, "soak")

    worker = Worker("soak", env, workdir / "worker.log")
    # exactly scripts/run.sh's command (Worker's own adds a name, -c 2 and no gossip/mingle)
    worker.args = [str(bin_dir / "celery"), "-A", "delayplatform", "worker", "--beat",
                   "--schedule", str(workdir / "celerybeat-schedule"), "--loglevel", "INFO"]
    stack.callback(_quietly(worker.stop))
    worker.start(timeout=120)

    port = free_port()
    with open(workdir / "web.log", "ab") as log:
        web = subprocess.Popen(
            [str(bin_dir / "gunicorn"), "delayplatform.wsgi", "--config", "gunicorn.conf.py",
             "--bind", f"127.0.0.1:{port}", "--workers", str(WEB_WORKERS), "--access-logfile", "-"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stack.callback(_quietly(lambda: _terminate(web)))
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if web.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {web.returncode}; see {workdir / 'web.log'}")
        try:
            return requests.get(url + "/readyz", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    wait_until(ready, 60, 0.5, "gunicorn's /readyz")
    headers = {"Authorization": f"Bearer {key}"}
    endpoints = [f"soak-{i}" for i in range(ENDPOINTS)]
    for name in endpoints:
        requests.post(url + "/api/endpoints/", json={"name": name}, headers=headers, timeout=60).raise_for_status()
    yield Deployment(run_id, workdir, env, url, key, node, worker, web, database_url, workdir / "archive",
                     endpoints)

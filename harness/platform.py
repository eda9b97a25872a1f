"""A throwaway copy of the platform for benchmarks and the reliability tests: its own RabbitMQ vhost
and PostgreSQL database, the cascade provisioned, gunicorn serving the API, real Celery worker(s),
and a team (TEAM) with an API key: the endpoints made through ``api`` are that team's. Everything is
removed on exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager

import psycopg
import requests

from harness.celery_worker import Worker
from harness.database import throwaway_database
from harness.paths import ARTIFACTS, ROOT
from harness.ports import free_port
from harness.vhosts import vhost_create, vhost_delete
from harness.waiting import wait_until
from rabbit import Management

AMQP = os.environ.get("BENCH_AMQP", "amqp://guest:guest@127.0.0.1:5672")
MANAGEMENT = os.environ.get("BENCH_MANAGEMENT", "http://guest:guest@127.0.0.1:15672")
TEAM = "bench"


class Platform:
    def __init__(self, run_id: str, env: dict, web_url: str, key: str):
        self.run_id, self.env, self.url, self.key = run_id, env, web_url, key
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"
        self.workers: list[Worker] = []
        self._sql, self._sql_lock = None, threading.Lock()

    def api(self, method: str, path: str, **kwargs):
        response = self.session.request(method, self.url + path, timeout=120, **kwargs)
        response.raise_for_status()
        return response.json()

    def start_worker(self, name: str = "bench", concurrency: int = 2, beat: bool = True, extra_args: tuple = (),
                     app: str = "delayplatform", **env) -> Worker:
        worker = Worker(f"{name}-{self.run_id}-{len(self.workers)}", {**self.env, **env},
                        ARTIFACTS / f"bench-{name}-{self.run_id}-{len(self.workers)}.log",
                        concurrency=concurrency, beat=beat, extra_args=extra_args, app=app)
        self.workers.append(worker.start())
        return worker

    def manage(self, *args: str) -> str:
        return manage(self.env, *args)

    def sql(self, query: str, *params):
        """One query on a connection kept for the run (polling with a new connection each time
        would cost PostgreSQL a backend start per poll, enough to skew the figures)."""
        with self._sql_lock:
            if self._sql is None or self._sql.closed:
                self._sql = psycopg.connect(self.env["DATABASE_URL"], autocommit=True)
            cursor = self._sql.execute(query, params)
            return cursor.fetchall() if cursor.description else []  # a statement without rows (DDL)

    def count_status(self, endpoint: str, *statuses: str) -> int:
        """How many of the endpoint's messages are in any of ``statuses``."""
        return self.sql("SELECT count(*) FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e "
                        "ON e.id = m.endpoint_id WHERE e.name = %s AND m.status = ANY(%s)", endpoint, list(statuses))[0][0]

    def close(self) -> None:
        if self._sql is not None:
            self._sql.close()


def manage(env: dict, *args: str) -> str:
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300)
    if result.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed: {result.stderr[-2000:]}")
    return result.stdout


def manage_each(env: dict, *commands: tuple[str, ...], then: str = "") -> list[str]:
    """Several manage.py commands run one after the other in one process, as ``manage.py`` runs
    each (call_command, with the same arguments), and then the Python ``then``: what each command
    printed. Django starts once instead of once a command (~2 s each on a busy machine)."""
    marker = f"--manage-each-{uuid.uuid4().hex}--"
    code = ("import io, json, sys\n"
            "from django.core.management import call_command\n"
            "printed = []\n"
            f"for args in {json.dumps(commands)}:\n"
            "    out = io.StringIO()\n"
            "    call_command(*args, stdout=out)\n"
            "    printed.append(out.getvalue())\n"
            f"{then}\n"
            f"sys.stdout.write({marker!r} + json.dumps(printed))\n")
    return json.loads(manage(env, "shell", "-c", code).rsplit(marker, 1)[1])


def team_with_key_commands(team: str, *team_args: str) -> tuple[tuple[str, ...], ...]:
    """create_team ``team`` (with ``team_args``), then create_api_key for it with every scope."""
    return ("create_team", team, *team_args), ("create_api_key", "--team", team, "--scope", "all", "--name", team)


def key_printed(printed: str) -> str:
    """The key, which create_api_key prints alone on its last line."""
    return printed.splitlines()[-1]


def team_with_key(env: dict, team: str, *team_args: str) -> str:
    """Make ``team`` (create_team ``team_args``) and a key of it with every scope: the key."""
    return key_printed(manage_each(env, *team_with_key_commands(team, *team_args))[-1])


def django_env(run_id: str, database_url: str, settings: str = "delayplatform.settings", **overrides) -> dict:
    """The environment of manage.py, gunicorn and workers pointed at the run's database."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": settings,
        "SECRET_KEY": "bench-only-" + run_id,
        "DATABASE_URL": database_url,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "LOG_LEVEL": "WARNING",
        "TEST_DB_CONN_MAX_AGE": "60",  # with settings_test: keep connections, as production (DB_CONN_MAX_AGE)
        # the bench measures the platform, not its rate limits (per user, per team, per key)
        "DELAY_API_RATE": "off",
        "DELAY_TEAM_API_RATE": "off",
        "DELAY_KEY_API_RATE": "off",
        **overrides,
    }


@contextmanager
def platform(web_workers: int = 4, broker_url: str | None = None, settings: str = "delayplatform.settings",
             team_args: tuple = ("--allow-task", "*"), **env_overrides):
    """``broker_url`` uses that broker as is (e.g. a private node) instead of a fresh vhost on the
    shared one; ``web_workers=0`` starts no web server (the API is then unavailable); ``team_args``:
    create_team's grants to the team TEAM (by default every Celery task the platform allows)."""
    run_id = uuid.uuid4().hex[:8]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    vhost = f"dp-bench-{run_id}"
    management = Management(MANAGEMENT)
    if broker_url is None:
        vhost_create(management=management, vhost=vhost)
    web = None
    p = None
    with throwaway_database(run_id) as database_url:
        env = django_env(run_id, database_url, settings, BROKER_URL=broker_url or f"{AMQP}/{vhost}",
                         **env_overrides)
        try:
            # migrate, provision_delays --version all, a superuser (for the admin's pages), the team
            # and its key: in one manage.py process (Django started once, not five times)
            printed = manage_each(env, ("migrate", "--noinput"), ("provision_delays", "--version", "all"),
                                  *team_with_key_commands(TEAM, *team_args),
                                  then="from django.contrib.auth.models import User; "
                                       "User.objects.create_superuser('bench', '', 'x')")
            key = key_printed(printed[-1])
            if not web_workers:
                p = Platform(run_id, env, "", key)
                yield p
                return
            port = free_port()
            web = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "delayplatform.wsgi", "--bind", f"127.0.0.1:{port}",
                 "--workers", str(web_workers), "--timeout", "120", "--log-level", "warning"],
                cwd=ROOT, env=env, start_new_session=True,
                stdout=open(ARTIFACTS / f"bench-web-{run_id}.log", "ab"), stderr=subprocess.STDOUT,
            )
            url = f"http://127.0.0.1:{port}"

            def up():
                try:
                    return requests.get(url + "/api/", timeout=1).status_code == 401
                except requests.RequestException:
                    return False

            wait_until(up, 60, 0.2, "gunicorn")
            p = Platform(run_id, env, url, key)
            p.web_pid = web.pid  # gunicorn's master (bench.studies.cluster_failover dumps its workers' stacks)
            yield p
        finally:
            if p:
                p.close()
            for worker in (p.workers if p else []):
                worker.stop()
            if web and web.poll() is None:
                os.killpg(web.pid, signal.SIGTERM)
                web.wait(30)
            time.sleep(0.5)
            if broker_url is None:
                vhost_delete(management=management, vhost=vhost)

"""What tests/e2e/test_team_broker.py and test_rabbitmq4.py share: a team's broker user made with
``manage.py team_broker_user`` (removed after), an outside app's Celery worker on it (the Python
client's tests/extapp: its own module tree, the client package and nothing of the platform's,
Celery's default node name and its gossip, mingle and heartbeat), and the AMQP operations that URL
must be refused, each on a connection of its own (a refusal closes the channel)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import amqp
from django.core.management import call_command

from harness.paths import ROOT
from harness.waiting import wait_until
from scheduling.config.conf import broker
from scheduling.models import ScheduledMessage, TopologyVersion
from scheduling.teams.broker_access import user_name
from scheduling.teams.services import api_key_create
from topology import cascade

CLIENT = ROOT / "clients" / "python"
# this run's settings, which another codebase's processes must not inherit (Celery reads BROKER_URL
# from the environment before its app's own broker)
PROJECT_ONLY = {"PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "BROKER_URL", "DATABASE_URL",
                "RABBITMQ_MANAGEMENT_URL", "SECRET_KEY"}


@contextmanager
def team_broker_url(team: str):
    """The URL ``team_broker_user`` prints on its last line; the user removed afterwards."""
    out = io.StringIO()
    call_command("team_broker_user", team, stdout=out)
    try:
        yield out.getvalue().splitlines()[-1]
    finally:
        broker().management.delete_user(user_name(team))


class ExtappWorker:
    """``celery -A extapp.app worker`` of the client's tests, with no ``-n``: Celery's default node
    name (``celery@<host>``), on the team's broker URL and its team's worker settings."""

    def __init__(self, env: dict, log: Path):
        self.log, self.env = log, env
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "extapp.app", "worker", "-l", "INFO", "-c", "1"],
            cwd=CLIENT / "tests", env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until(self._ready, 90, 0.2, "the outside app's worker to be ready")
        except AssertionError as exc:
            self.stop()
            raise AssertionError(f"{exc}; its log ends:\n{self.text()[-3000:]}") from None

    def _ready(self) -> bool:
        assert self.process.poll() is None, f"the outside worker exited: {self.text()[-3000:]}"
        return " ready." in self.text()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def run(self, code: str) -> str:
        """Python run as the outside app (its environment, nothing of the platform's): stdout."""
        done = subprocess.run([sys.executable, "-c", code], cwd=CLIENT / "tests", env=self.env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def extapp_env(*, url: str, team: str, queue: str, runs: Path, platform_url: str, key: str) -> dict:
    inherited = {k: v for k, v in os.environ.items() if k not in PROJECT_ONLY and not k.startswith(("CELERY_", "PYTEST_"))}
    return {**inherited, "PYTHONPATH": os.pathsep.join([str(CLIENT / "src"), str(CLIENT / "tests")]),
            "EXTAPP_BROKER_URL": url, "EXTAPP_TEAM": team, "EXTAPP_ENDPOINT": queue.split("--", 1)[1],
            "EXTAPP_QUEUE": queue, "EXTAPP_RUNS": str(runs), "DELAY_PLATFORM_URL": platform_url,
            "DELAY_PLATFORM_KEY": key, "DELAY_PLATFORM_TEAM": team}


def _connect(url: str) -> amqp.Connection:
    parts = urlsplit(url)
    connection = amqp.Connection(f"{parts.hostname}:{parts.port or 5672}", userid=unquote(parts.username),
                                 password=unquote(parts.password), virtual_host=unquote(parts.path[1:]) or "/",
                                 connect_timeout=10)
    connection.connect()
    return connection


def outcome(url: str, action) -> str:
    """``action(channel)`` on a fresh connection as ``url``: "ok", or the AMQP error's name (the
    broker's reply code: 403 ACCESS_REFUSED)."""
    connection = _connect(url)
    try:
        channel = connection.channel()
        try:
            action(channel)
        except amqp.exceptions.AMQPError as exc:
            return f"{exc.code} {type(exc).__name__}"
        return "ok"
    finally:
        try:
            connection.close()
        except (OSError, amqp.exceptions.AMQPError):
            pass


def consume(queue: str):
    return lambda channel: channel.basic_consume(queue, callback=lambda message: None)


def purge(queue: str):
    return lambda channel: channel.queue_purge(queue)


def delete(queue: str):
    return lambda channel: channel.queue_delete(queue)


def publish(exchange: str, routing_key: str):
    """Publish with confirms: a refused publish closes the channel, which the confirm wait sees."""
    def act(channel):
        channel.confirm_select()
        channel.basic_publish_confirm(amqp.Message(b'{"forged": true}'), exchange=exchange, routing_key=routing_key,
                                      mandatory=False, timeout=10)
    return act


def refusals(url: str, *, other_queue: str, level_queue: str, cascade_exchanges: list[str], own_queue: str) -> dict:
    """Every operation the team's URL must not do -> what the broker answered."""
    found = {}
    for name, queue in (("another team's queue", other_queue), ("a cascade level", level_queue)):
        found[f"consume {name}"] = outcome(url, consume(queue))
        found[f"purge {name}"] = outcome(url, purge(queue))
        found[f"publish to {name} (default exchange)"] = outcome(url, publish("", queue))
        found[f"delete {name}"] = outcome(url, delete(queue))
    for exchange in cascade_exchanges:
        found[f"publish to {exchange}"] = outcome(url, publish(exchange, other_queue))
    found["delete its own endpoint's queue (the platform's to declare)"] = outcome(url, delete(own_queue))
    return found


def cascade_targets() -> tuple[str, list[str]]:
    """A level queue of v3 and the cascade exchanges a forged message would enter by."""
    version = TopologyVersion.objects.get(name="v3").cascade
    return cascade.level_name(version.prefix, 3), [cascade.delivery_exchange(version.prefix),
                                                   cascade.ingest_exchange(version.prefix),
                                                   cascade.next_exchange(version, 3)]


def _runs(path: Path, token: str) -> list[dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []
    return [r for r in lines if r["token"] == token]


def outside_worker_runs_and_is_refused(*, team, own_queue: str, other_queue: str, platform_url: str,
                                       folder: Path) -> dict:
    """With the URL ``team_broker_user`` prints for ``team``: the outside app's worker (default
    node name) starts, runs a task delayed through the platform (``PlatformTask``) once, claimed,
    and answers ``app.control.ping`` through its own pidbox and reply queues, never refused
    itself. Returns what the broker answered each operation of :func:`refusals` with that URL."""
    key = api_key_create(team=team, scopes=["all"]).key
    runs = folder / "runs.jsonl"
    with team_broker_url(team.name) as url:
        assert url.startswith(f"amqp://{user_name(team.name)}:") and url.endswith(
            "/" + (broker().vhost if broker().vhost != "/" else ""))
        outside = ExtappWorker(extapp_env(url=url, team=team.name, queue=own_queue, runs=runs, platform_url=platform_url,
                                          key=key), folder / "extapp-worker.log")
        try:
            token = uuid.uuid4().hex[:8]
            task_id = outside.run("from extapp import tasks; "
                                  f"print(tasks.record.apply_async(args=[{token!r}], countdown=2).id)").strip()
            (run,) = wait_until(lambda: _runs(runs, token), 60, 0.2, "the outside app's delayed task to run")
            assert run["id"] == task_id and run["message_id"]
            wait_until(lambda: ScheduledMessage.objects.get(id=run["message_id"]).status == "delivered", 15, 0.2,
                       "its claim recorded")
            pong = outside.run("from extapp.app import app; print(app.control.ping(timeout=5))")
            assert "'ok': 'pong'" in pong and "'celery@" in pong, pong  # Celery's default node name
            level, exchanges = cascade_targets()
            answers = refusals(url, other_queue=other_queue, level_queue=level, cascade_exchanges=exchanges,
                               own_queue=own_queue)
            assert outside.process.poll() is None
            assert "RESOURCE_LOCKED" not in outside.text() and "ACCESS_REFUSED" not in outside.text()
        finally:
            outside.stop()
        assert len(_runs(runs, token)) == 1  # once
    return answers

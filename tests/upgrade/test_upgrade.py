"""An upgrade under traffic, as docs/operations/upgrades.md tells an operator to do it: the previous
release (the commit pyproject.toml names, in a virtualenv of its own) serves with messages in
flight, a recurring schedule and API traffic; the working tree's ``migrate`` runs while the
previous web keeps answering; then web, worker and beat are replaced by the new release's.

Counted, not sampled: every request's answer (none may fail: not during migrate, not during the
roll), every webhook call per message id (each message exactly once), the schedule's runs (every
slot, before and after the roll), the old credentials on the new web. ``make test-upgrade`` runs
it (minutes: it installs a virtualenv); ``make test`` does not (pyproject.toml's norecursedirs)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import requests

from delayplatform import __version__
from harness.database import throwaway_database
from harness.paths import ARTIFACTS, ROOT
from harness.ports import free_ports
from harness.recording_server import RecordingServer
from harness.vhosts import vhost_own
from harness.waiting import wait_until
from rabbit import Management
from scheduling.config.conf import setting_name
from tests.upgrade.release import Release, previous_release_commit, timed, unpack, virtualenv
from tests.upgrade.traffic import Traffic

pytestmark = pytest.mark.upgrade

MESSAGES = 300  # in flight when the upgrade starts, due over the next SPREAD_SECONDS
SPREAD_SECONDS = 60
INTERVAL_SECONDS = 2  # the recurring schedule's
AHEAD_SECONDS = 30  # how far ahead its runs are made (the default, 60, would make the test a minute longer)
ENDPOINT, SCHEDULE, TEAM = "hooks", "tick", "upgrade"
# Previous releases whose worker, stopped warm, cut off the webhook calls under way: the receiver had
# the call, no success was recorded, and the next worker called the message again once its lease ran
# out (the engine lets them finish since 1.0.0: the test stops a new worker too, and there none may).
# The receiver holds each call RECEIVER_HOLD_SECONDS, so a stop finds one under way.
CUTS_CALLS_AT_STOP = {"12c5d34601d27918f99377942bfa6cc48c94c56b"}
RECEIVER_HOLD_SECONDS = 0.2
# the previous release's virtualenv, kept between runs while working on this test (never in make)
REUSE_VENV = os.environ.get("DP_UPGRADE_PREVIOUS_VENV")


def platform_env(run_id: str, database_url: str, broker_url: str) -> dict:
    """Both releases' processes: the production settings on the run's database and vhost, schedules'
    runs made every second up to AHEAD_SECONDS ahead (a beat being replaced misses no run; a pause
    of beat longer than that would, by design: such runs are counted as missed)."""
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    return {**env, "DJANGO_SETTINGS_MODULE": "delayplatform.settings", "SECRET_KEY": f"upgrade-only-{run_id}",
            "DATABASE_URL": database_url, "BROKER_URL": broker_url, "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "INFO", setting_name("schedules_every_seconds"): "1",
            setting_name("schedules_ahead_seconds"): str(AHEAD_SECONDS), setting_name("sweep_seconds"): "1",
            setting_name("delivery_processes"): "1", setting_name("worker_metrics_port"): "0",
            setting_name("team_min_schedule_interval_seconds"): "1", setting_name("api_rate"): "off",
            setting_name("team_api_rate"): "off", setting_name("key_api_rate"): "off"}


SETUP = """
import json
from django.contrib.auth.models import User
from django.core.management import call_command
from io import StringIO
User.objects.create_user("operator-person")
call_command("create_team", "{team}", "--member", "operator-person:admin", stdout=StringIO())
keys = {{}}
for name, args in (("token", ["--user", "operator-person"]), ("team_key", ["--team", "{team}", "--scope", "all"])):
    out = StringIO()
    call_command("create_api_key", *args, "--name", name, stdout=out)
    keys[name] = out.getvalue().strip().splitlines()[-1]
print(json.dumps(keys))
"""


@pytest.fixture
def broker_url():
    """A vhost of the test's own on the run's RabbitMQ node."""
    from django.conf import settings

    parts = urlsplit(settings.BROKER_URL.split(";")[0])
    vhost = f"dp-upgrade-{uuid.uuid4().hex[:8]}"
    # make test-upgrade runs alone, on the machine's node (whose management plugin scripts/services.sh
    # enables); under pytest-xdist settings_test names the process's own node
    management = settings.RABBITMQ_MANAGEMENT_URL or f"http://guest:guest@{parts.hostname}:15672"
    with vhost_own(management=Management(management), vhost=vhost):
        yield urlunsplit((parts.scheme, parts.netloc, f"/{vhost}", "", ""))


@pytest.fixture
def previous(tmp_path_factory):
    """The previous release unpacked, with its virtualenv: (its tree, its python, seconds to install)."""
    root = Path(tempfile.mkdtemp(prefix="dp-previous-"))
    try:
        unpack(previous_release_commit(), root)
        if REUSE_VENV:
            python, seconds = REUSE_VENV + "/bin/python", 0.0
        else:
            python, seconds = timed(virtualenv, root)
        yield root, str(python), seconds
    finally:
        shutil.rmtree(root, ignore_errors=True)


def called(receiver: RecordingServer) -> Counter:
    """Webhook calls per message id (the Standard Webhooks ``webhook-id`` header)."""
    return Counter({name.lower(): value for name, value in request["headers"].items()}["webhook-id"]
                   for request in list(receiver.requests))


def cut_by_the_previous_workers_stop(calls_at: list[float], attempts: list[tuple], stop: tuple[float, float]) -> bool:
    """Whether a message called twice was first called while the previous worker stopped (``stop``:
    from when it was told to until it had) with no successful attempt of that worker recorded, and
    then once by the new worker, successfully (its webhook engine cut the call off at the stop)."""
    return (len(calls_at) == 2 and stop[0] <= calls_at[0] <= stop[1]
            and not any(a[3].startswith("previous-") and a[6] == "ok" for a in attempts)
            and [a[6] for a in attempts if a[3].startswith("new")] == ["ok"])


def bulk(url: str, key: str, count: int) -> list[str]:
    ids = []
    for start in range(0, count, 100):
        messages = [{"endpoint": ENDPOINT, "payload": {"n": n},
                     "delay_seconds": round(5 + n * SPREAD_SECONDS / count, 3)}  # due 5 s to a minute from now
                    for n in range(start, min(count, start + 100))]
        answer = requests.post(f"{url}/api/messages/bulk/", json={"messages": messages}, timeout=60,
                               headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 201, answer.text[:500]
        ids += [m["id"] for m in answer.json()["messages"]]
    return ids


def test_an_upgrade_under_traffic_loses_nothing_and_fails_no_request(previous, broker_url):
    previous_root, previous_python, install_seconds = previous
    run_id = uuid.uuid4().hex[:8]
    figures: dict = {"previous_release": previous_release_commit(), "new_release": __version__,
                     "install_seconds": round(install_seconds, 1)}
    with throwaway_database(f"upgrade_{run_id}") as database_url, RecordingServer(hold_seconds=RECEIVER_HOLD_SECONDS) as receiver:
        env = platform_env(run_id, database_url, broker_url)
        old = Release("previous", previous_root, previous_python, run_id)
        new = Release("new", ROOT, sys.executable, run_id)
        traffic, moments = None, {"start": time.monotonic()}
        try:
            # --- the previous release, as it ran: migrated, provisioned, serving -------------------------
            started = time.perf_counter()
            old.manage(env, "migrate", "--noinput", "--skip-checks", "-v0")
            old.manage(env, "provision_delays", "--version", "all")
            keys = json.loads(old.manage(env, "shell", "-c", SETUP.format(team=TEAM)).strip().splitlines()[-1])
            old_port, new_port = free_ports(2)
            old_url, new_url = f"http://127.0.0.1:{old_port}", f"http://127.0.0.1:{new_port}"
            old_web, old_worker, old_beat = old.web(env, old_port), old.worker(env), old.beat(env)
            figures["previous_start_seconds"] = round(time.perf_counter() - started, 1)
            team = {"Authorization": f"Bearer {keys['team_key']}"}
            made = requests.post(f"{old_url}/api/endpoints/", headers=team, timeout=30, json={
                "name": ENDPOINT, "handler": "webhook", "handler_target": receiver.url})
            assert made.status_code == 201, made.text
            made = requests.post(f"{old_url}/api/schedules/", headers=team, timeout=30, json={
                "key": SCHEDULE, "endpoint": ENDPOINT, "payload": {"tick": True}, "interval_seconds": INTERVAL_SECONDS})
            assert made.status_code == 201, made.text
            in_flight = bulk(old_url, keys["team_key"], MESSAGES)
            traffic = Traffic(url=old_url, web="previous", token=keys["token"], team_key=keys["team_key"],
                              endpoint=ENDPOINT, schedule=SCHEDULE)
            traffic.start()
            wait_until(lambda: len(receiver.requests) >= 3 and traffic.requests_made() >= 30, 60, 0.2,
                       "the previous release to deliver and answer")

            # --- the new release's migrate, while the previous one serves ---------------------------------
            moments["migrate"] = time.monotonic()
            traffic.phase = "migrate"
            printed, seconds = timed(new.manage, env, "migrate", "--noinput", "-v1")
            figures["migrate_seconds"] = round(seconds, 1)
            figures["migrations_applied"] = [line.split()[1] for line in printed.splitlines()
                                             if line.strip().startswith("Applying ")]
            traffic.phase = "provision"
            new.manage(env, "provision_delays", "--version", "all")

            # --- the roll: web, then worker, then beat ---------------------------------------------------
            traffic.phase = "roll"
            roll_started, moments["roll"] = time.perf_counter(), time.monotonic()
            new_web = new.web(env, new_port)
            traffic.point_at(new_url, "new")
            old_web.stop()
            moments["web rolled"] = time.monotonic()
            new_worker = new.worker(env)
            moments["new worker ready"] = time.monotonic()
            old_worker.stop()
            moments["previous worker stopped"] = time.monotonic()
            old_beat.stop()
            new.beat(env)
            moments["beat rolled"] = time.monotonic()
            # and the new release's own warm stop, as at the next upgrade: a second worker, the first stopped
            new.worker(env, "new2")
            moments["new worker 2 ready"] = time.monotonic()
            new_worker.stop()
            moments["new worker stopped"] = time.monotonic()
            beat_replaced_at = time.time()
            figures["roll_seconds"] = round(time.perf_counter() - roll_started, 1)
            traffic.phase = "after"
            wait_until(lambda: traffic.requests_made("after") >= 60, 120, 0.2, "traffic on the new release")
            with psycopg.connect(database_url, autocommit=True) as conn:
                wait_until(lambda: conn.execute(
                    "SELECT count(*) FROM scheduling_scheduledmessage WHERE schedule = %s AND status = 'delivered' "
                    "AND created_at > to_timestamp(%s)", (SCHEDULE, beat_replaced_at)).fetchone()[0] >= 2,
                    AHEAD_SECONDS + 120, 0.5, "two runs the new beat made, delivered")
            traffic.stop()
            assert new_web.popen.poll() is None

            # --- the schedule paused (its runs to come cancelled), then everything settles ----------------
            paused = requests.post(f"{new_url}/api/schedules/{SCHEDULE}/pause/", headers=team, timeout=30)
            assert paused.status_code == 200, paused.text
            with psycopg.connect(database_url, autocommit=True) as conn:
                def settled():
                    return not conn.execute("SELECT count(*) FROM scheduling_scheduledmessage "
                                            "WHERE status IN ('pending', 'published')").fetchone()[0]

                wait_until(settled, SPREAD_SECONDS + 120, 0.5, "every message delivered")
                rows = conn.execute("SELECT id::text, status, schedule, due_at, lateness_ms, created_at "
                                    "FROM scheduling_scheduledmessage").fetchall()
                delivered = {row[0] for row in rows if row[1] == "delivered"}
                wait_until(lambda: delivered <= called(receiver).keys(), 60, 0.2, "a call for every delivered message")
                quiet_since = len(receiver.requests)
                time.sleep(3)  # a second call of any message would come now
                twice = [message for message, n in called(receiver).items() if n > 1]
                attempts = conn.execute(  # what the workers recorded of those, to tell why
                    "SELECT a.message_id::text, a.number, a.trigger, a.worker, a.started_at, a.duration_ms, a.outcome, "
                    "a.status_code, m.due_at, m.delivered_at, m.delivery_count FROM scheduling_messageattempt a JOIN "
                    "scheduling_scheduledmessage m ON m.id = a.message_id WHERE a.message_id::text = ANY(%s) "
                    "ORDER BY 1, a.started_at", (twice,)).fetchall()
                assert len(receiver.requests) == quiet_since
            root = requests.get(f"{new_url}/api/", headers=team, timeout=30).json()
        finally:
            try:
                if traffic is not None and traffic.is_alive():
                    traffic.stop()
            finally:
                try:
                    new.stop_all()
                finally:
                    old.stop_all()

    # every request answered, in every phase, by both webs
    answers = {f"{phase} {web} {credential} {status}": n for (phase, web, credential, status), n
               in sorted(traffic.answers.items())}
    figures["requests"] = answers
    figures["requests_during_migrate"] = traffic.requests_made("migrate")
    figures["requests_failed"] = Counter(failure.split(":")[0] for failure in traffic.failures)
    print("\nRequests through the upgrade:\n" + json.dumps(figures, indent=2))
    assert traffic.failures == [], f"{len(traffic.failures)} requests failed, the first: {traffic.failures[:5]}"
    assert traffic.requests_made("migrate", "previous") >= 5  # the old web answered while migrate ran
    for credential in ("token", "team key"):  # the old credentials work on the new web
        assert traffic.requests_made("after", "new", credential, ok=True) >= 10
    assert root["version"] == __version__

    # every message exactly once: the in-flight ones, the traffic's, the schedule's runs
    calls = called(receiver)
    statuses = Counter(row[1] for row in rows)
    assert set(in_flight) <= delivered and set(traffic.scheduled) <= delivered
    assert {row[1] for row in rows if row[2] is None} == {"delivered"}  # only schedule runs were cancelled
    twice = {message: n for message, n in calls.items() if n != 1}
    at = {message: [r["at"] for r in receiver.requests
                    if {k.lower(): v for k, v in r["headers"].items()}["webhook-id"] == message] for message in twice}
    stop = (moments["new worker ready"], moments["previous worker stopped"])
    cut = {message for message in twice if cut_by_the_previous_workers_stop(
        at[message], [a for a in attempts if a[0] == message], stop)}
    figures["called_twice_cut_at_the_previous_workers_stop"] = len(cut)
    if previous_release_commit() in CUTS_CALLS_AT_STOP:
        twice = {message: n for message, n in twice.items() if message not in cut}
    at = {message: [round(t - moments["start"], 2) for t in at[message]] for message in twice}
    assert not twice, (f"called more than once: {twice}, at (s): {at}, the roll's moments (s): "
                       f"{ {k: round(v - moments['start'], 2) for k, v in moments.items()} }, attempts: {attempts}")
    assert set(calls) == delivered, (f"delivered but not called: {len(delivered - set(calls))}, "
                                     f"called but not delivered: {len(set(calls) - delivered)}")

    # the schedule ran before and after the roll, every slot once
    runs = sorted(row[3] for row in rows if row[2] == SCHEDULE and row[1] == "delivered")
    gaps = [b - a for a, b in zip(runs, runs[1:]) if b - a != timedelta(seconds=INTERVAL_SECONDS)]
    assert not gaps, f"schedule runs not every {INTERVAL_SECONDS} s: {gaps}"
    assert len([r for r in runs if r.timestamp() > beat_replaced_at + INTERVAL_SECONDS]) >= 2
    made_by_new_beat = [row for row in rows if row[2] == SCHEDULE and row[5].timestamp() > beat_replaced_at]
    assert len([row for row in made_by_new_beat if row[1] == "delivered"]) >= 2

    lateness = sorted(row[4] for row in rows if row[1] == "delivered" and row[4] is not None)
    figures.update(messages=len(rows), statuses=dict(statuses), schedule_runs=len(runs),
                   p99_lateness_ms=lateness[max(0, -(-len(lateness) * 99 // 100) - 1)],
                   max_lateness_ms=lateness[-1], webhook_calls=len(receiver.requests))
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "upgrade.json").write_text(json.dumps(figures, indent=2))
    print("\nUpgrade under traffic:\n" + json.dumps(figures, indent=2))

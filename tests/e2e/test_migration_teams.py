"""A database from before teams (migration 0018), with messages in the cascade and a DRF token,
migrated while they are in flight: every message is delivered once, through the queue it always
had; the token still authenticates (as ``Token <key>``), and no table holds it in clear."""

import json
import subprocess
import sys
import uuid
from datetime import timedelta

import psycopg
import pytest
from django.utils import timezone

from harness.celery_worker import Worker
from harness.database import throwaway_database
from harness.paths import ARTIFACTS, ROOT
from harness.waiting import wait_until
from scheduling.config.conf import broker
from scheduling.messages import wire
from scheduling.models import Endpoint, ScheduledMessage, Team, TopologyVersion
from topology import cascade

pytestmark = pytest.mark.broker
TOKEN = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"  # the form of a DRF token: 40 hex characters
MESSAGES = 20


def manage(env: dict, *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_database_from_before_teams_migrates_with_messages_in_flight(worker_env, provisioned):
    run = uuid.uuid4().hex[:8]
    queue = f"legacy-{run}"
    with throwaway_database(f"teams_{run}") as url:
        # no rescue: a busy machine's late worker would publish copies of the overdue messages, whose
        # second hand-overs (suppressed by design) would count in delivery_count below
        env = {**worker_env, "DATABASE_URL": url, "DELAY_RESCUE_AFTER_MS": "0"}
        manage(env, "migrate", "auth", "-v0")
        manage(env, "migrate", "scheduling", "0018_flow_control", "-v0")
        ids = _before_teams(url, queue)
        manage(env, "migrate", "-v0")  # teams, while the messages wait in the cascade
        worker = Worker(f"migrated-{run}", env, ARTIFACTS / f"worker-migrated-{run}.log", beat=False).start()
        try:
            rows = wait_until(lambda: _delivered(url, ids), 60, 0.5, "every message delivered after the migration")
        finally:
            worker.stop()
        assert all(count == 1 and delivered >= due for _, count, delivered, due in rows)  # once, never early
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT e.queue, t.name FROM scheduling_endpoint e JOIN scheduling_team t "
                                "ON t.id = e.team_id").fetchall() == [(queue, "default")]
            assert conn.execute("SELECT to_regclass('authtoken_token')").fetchone()[0] is None
            stored = [str(v) for row in conn.execute("SELECT * FROM scheduling_apikey").fetchall() for v in row]
            assert stored and not any(TOKEN in value for value in stored)
            assert conn.execute("SELECT m.role FROM scheduling_membership m JOIN auth_user u ON u.id = m.user_id "
                                "WHERE u.username = 'reader'").fetchone() == ("viewer",)
        answer = json.loads(manage(env, "shell", "-c", (
            "import json; from django.test import Client; c = Client(HTTP_HOST='127.0.0.1'); "
            f"ok = c.get('/api/messages/', HTTP_AUTHORIZATION='Token {TOKEN}'); "
            f"bad = c.get('/api/messages/', HTTP_AUTHORIZATION='Token {TOKEN[:-1]}0'); "
            "print(json.dumps([ok.status_code, len(ok.json()['results']), bad.status_code]))")).strip().splitlines()[-1])
        assert answer == [200, MESSAGES, 401]


def _before_teams(url: str, queue: str) -> list[str]:
    """What a platform before teams had: a user with a DRF token, an endpoint whose queue is its
    name, and MESSAGES published rows whose copies are in the v3 cascade (due in 6 to 10 s)."""
    now = timezone.now()
    version = cascade.get_version("v3")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamptz NOT NULL, "
                     "user_id integer NOT NULL)")
        user_id = conn.execute("INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email, "
                               "is_staff, is_active, date_joined) VALUES ('!', false, 'reader', '', '', '', false, "
                               "true, now()) RETURNING id").fetchone()[0]
        conn.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [TOKEN, user_id])
        topology_id = conn.execute("SELECT id FROM scheduling_topologyversion WHERE name = 'v3'").fetchone()[0]
        endpoint_id = conn.execute(
            "INSERT INTO scheduling_endpoint (name, topology_id, handler, delivery_mode, handler_target, webhook_secret, "
            "webhook_secret_previous, is_active, created_at, updated_at) VALUES (%s, %s, 'none', 'native', '', '', '', "
            "true, now(), now()) RETURNING id", [queue, topology_id]).fetchone()[0]
        endpoint = Endpoint(pk=endpoint_id, team=Team(pk=0, name="default"), name=queue, queue=queue,
                            topology=TopologyVersion(pk=topology_id, name="v3", prefix=version.prefix))
        rows, outgoing = [], []
        for n in range(MESSAGES):
            message = ScheduledMessage(id=uuid.uuid4(), endpoint=endpoint, topology=endpoint.topology, payload={"n": n},
                                       due_at=now + timedelta(seconds=6 + n / 5), created_at=now)
            out, route = wire.outgoing(message, version, now, margin_ms=250)
            rows.append((message, route))
            outgoing.append(out)
        with broker().session() as session:
            session.declare_queue(cascade.endpoint_queue(queue))
            session.bind(cascade.endpoint_binding(version, queue))
            assert session.publish(outgoing).confirmed == set(range(MESSAGES))
        for message, route in rows:
            conn.execute(
                "INSERT INTO scheduling_scheduledmessage (id, endpoint_id, topology_id, delivery_mode, payload, due_at, "
                "requested_delay_ms, status, routing_key, first_exchange, created_at, published_at, delivered_by, "
                "delivery_count, attempts, last_error) VALUES (%s, %s, %s, 'native', %s, %s, %s, 'published', %s, %s, "
                "%s, %s, '', 0, 0, '')",
                [message.id, endpoint_id, topology_id, json.dumps(message.payload), message.due_at,
                 int((message.due_at - now).total_seconds() * 1000), route.routing_key, route.exchange, now, now])
    return [str(message.id) for message, _ in rows]


def _delivered(url: str, ids: list[str]):
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT id, delivery_count, delivered_at, due_at FROM scheduling_scheduledmessage "
                            "WHERE id = ANY(%s) AND status = 'delivered'", [ids]).fetchall()
    return rows if len(rows) == len(ids) else None

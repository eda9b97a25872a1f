"""The rows of concurrent API calls gathered into shared envelopes, end to end: the API under gunicorn
with threads (2 processes of 8), a real worker. 160 single-message calls at once, due in one
second: fewer broker messages than messages, every message delivered once (one handler run each),
none early; each web process publishes on one connection with one channel."""

import subprocess
import threading
import time
from datetime import timedelta

import pytest
import requests
from django.utils import timezone

from harness.platform import MANAGEMENT, platform
from harness.waiting import wait_until
from rabbit import Management

pytestmark = pytest.mark.broker

N, CLIENTS = 160, 32

OUTCOME_SQL = """
    SELECT m.id::text, m.status, m.delivery_count, (m.delivered_at < m.due_at) AS early,
           (SELECT count(*) FROM testapp_receipt r WHERE r.message_id = m.id::text) AS handler_runs
    FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e ON e.id = m.endpoint_id
    WHERE e.name = %s
"""


def metric(p, name: str) -> float:
    """A counter summed over its labels and every gunicorn process (/metrics is multi-process)."""
    text = requests.get(p.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def schedule_at_once(p, name: str, due) -> list[dict]:
    """N single-message POSTs from CLIENTS threads at once; every answer."""
    answers, errors, lock = [], [], threading.Lock()
    todo = iter(range(N))
    barrier = threading.Barrier(CLIENTS)

    def client():
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {p.key}"
        barrier.wait(30)
        while True:
            with lock:
                n = next(todo, None)
            if n is None:
                return
            try:
                response = session.post(p.url + "/api/messages/", timeout=60, json={
                    "endpoint": name, "payload": {"n": n}, "deliver_at": due.isoformat()})
                response.raise_for_status()
                with lock:
                    answers.append(response.json())
            except Exception as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[:3]
    return answers


def test_concurrent_api_calls_share_envelopes_and_every_message_is_delivered_once():
    with platform(web_workers=2, settings="delayplatform.settings_test", GUNICORN_CMD_ARGS="--threads 8") as p:
        p.start_worker(concurrency=2)
        name = "gathered"
        p.api("POST", "/api/endpoints/", json={"name": name, "topology": "v3", "handler": "celery_task",
                                               "handler_target": "testapp.record_receipt"})
        before = metric(p, "delay_relay_broker_messages_total"), metric(p, "delay_relay_published_total")
        # one due time for all, 8 s ahead, whole units from the start: one envelope key per process
        due = (timezone.now() + timedelta(seconds=8)).replace(microsecond=500_000)
        answers = schedule_at_once(p, name, due)
        assert len(answers) == N and {a["status"] for a in answers} == {"published"}
        broker_messages = metric(p, "delay_relay_broker_messages_total") - before[0]
        published = metric(p, "delay_relay_published_total") - before[1]
        assert published == N
        assert broker_messages <= 0.9 * N, f"{broker_messages:.0f} broker messages for {N} messages"

        # each gunicorn process: one publishing connection, one channel (the management API lags ~5 s)
        web_pids = [int(pid) for pid in subprocess.run(["pgrep", "-P", str(p.web_pid)], capture_output=True,
                                                        text=True).stdout.split()]
        management, vhost = Management(MANAGEMENT), p.env["BROKER_URL"].rsplit("/", 1)[1]

        def publishers():
            connections = [c for c in management._request("GET", f"/vhosts/{management._v(vhost)}/connections") or []
                           if "publisher" in str(c.get("client_properties", {}).get("connection_name", ""))]
            per_pid = {pid: [c for c in connections
                             if str(c["client_properties"]["connection_name"]).endswith(f" pid {pid}")]
                       for pid in web_pids}
            return per_pid if all(len(cs) == 1 and cs[0].get("channels") == 1 for cs in per_pid.values()) else None

        wait_until(publishers, 30, 1, "one publishing connection with one channel per web process")

        wait_until(lambda: p.count_status(name, "delivered") == N, 60, 0.5, "every message delivered")
        time.sleep(1)  # the handlers' receipts
        rows = p.sql(OUTCOME_SQL, name)
        assert len(rows) == N
        assert [r for r in rows if r[1] != "delivered" or r[3] or r[4] != 1] == []  # once each, none early
        print(f"\n{N} API calls at once: {broker_messages:.0f} broker messages ({1000 * broker_messages / N:.0f} "
              f"per 1,000 messages)")


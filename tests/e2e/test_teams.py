"""Two teams through the API against a real worker: each creates `billing`, each gets its
deliveries through its own queue, and B's key never sees, changes or sends to A's; a Celery task
sent as data runs once on a worker of the team's queue when the team's allowlist has it, and is
refused for the team whose allowlist does not."""

import uuid

import pytest

from harness.celery_worker import Worker
from harness.paths import ARTIFACTS
from harness.testapp.models import Receipt
from harness.waiting import wait_until
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.teams.services import team_create
from tests.conftest import _key_client

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status


@pytest.fixture
def teams(platform, worker, amqp):
    """Team a may run testapp's tasks, team b none; a key of every scope each."""
    a = team_create(name=f"a-{uuid.uuid4().hex[:6]}", celery_task_allowlist="testapp.*")
    b = team_create(name=f"b-{uuid.uuid4().hex[:6]}")
    yield {"a": _key_client(team=a, scopes=["all"]), "b": _key_client(team=b, scopes=["all"])}
    for endpoint in Endpoint.objects.filter(team__in=[a, b]):
        amqp.delete_queue(endpoint.queue)


def delivered(ids):
    def check():
        rows = list(ScheduledMessage.objects.filter(id__in=ids, status=Status.DELIVERED))
        return rows if len(rows) == len(ids) else None

    return check


def test_each_team_s_billing_delivers_through_its_own_queue_and_b_never_reaches_a_s(teams):
    a, b = teams["a"], teams["b"]
    queues = {}
    for name, key in teams.items():
        made = key.post("/api/endpoints/", {"name": "billing"}, format="json")
        assert made.status_code == 201, made.content
        queues[name] = made.json()["queue"]
    assert queues["a"] != queues["b"] and all(q.endswith("--billing") for q in queues.values())
    sent = {name: key.post("/api/messages/bulk/", {"messages": [
        {"endpoint": "billing", "payload": {"team": name, "n": n}, "delay_seconds": 1 + n / 4} for n in range(4)]},
        format="json").json()["messages"] for name, key in teams.items()}
    ids = {name: [m["id"] for m in messages] for name, messages in sent.items()}
    rows = wait_until(delivered(ids["a"] + ids["b"]), 30, 0.2, "both teams' messages delivered")
    for row in rows:
        team = "a" if str(row.id) in ids["a"] else "b"
        assert row.routing_key == queues[team] and row.payload["team"] == team  # through its own queue
        assert row.delivery_count == 1 and row.delivered_at >= row.due_at
    assert all(b.get(f"/api/messages/{i}/").status_code == 404 for i in ids["a"])
    assert {m["id"] for m in b.get("/api/messages/").json()["results"]} == set(ids["b"])
    assert b.post("/api/messages/", {"endpoint": "billing", "team": a.key.row.team.name, "payload": {},
                                     "delay_seconds": 1}, format="json").status_code == 400
    everything = {"created_after": "1970-01-01T00:00:00Z", "status": "delivered", "dry_run": True}
    assert b.post("/api/messages/republish/", {**everything, "status": "failed"}, format="json").json() == \
        {"count": 0, "exact": True}
    assert b.post("/api/messages/cancel/", {"created_after": "1970-01-01T00:00:00Z", "dry_run": True},
                  format="json").json() == {"count": 0, "exact": True}


def test_a_task_sent_as_data_runs_once_on_the_team_s_queue_only_when_allowlisted(teams, worker_env):
    a, b = teams["a"], teams["b"]
    made = a.post("/api/endpoints/", {"name": "tasks", "handler": "celery_queue"}, format="json")
    assert made.status_code == 201, made.content
    queue = made.json()["queue"]
    task_id = f"e2e-{uuid.uuid4().hex[:8]}"
    sent = a.post("/api/messages/", {"endpoint": "tasks", "delay_seconds": 2, "payload": {
        "task": "testapp.plain_receipt", "args": ["hello"], "kwargs": {"from": "a"}, "id": task_id}}, format="json")
    assert sent.status_code == 201, sent.content
    runner = Worker(f"tasks-{uuid.uuid4().hex[:6]}", worker_env, ARTIFACTS / f"worker-tasks-{task_id}.log",
                    concurrency=1, beat=False, extra_args=("-Q", queue)).start()
    try:
        (receipt,) = wait_until(lambda: list(Receipt.objects.filter(message_id__startswith=f"{task_id}#")), 30, 0.2,
                                "the task to run")
        row = wait_until(delivered([sent.json()["id"]]), 15, 0.2, "its row recorded delivered")[0]
        assert receipt.payload["args"] == ["hello"] and receipt.payload["kwargs"] == {"from": "a"}
        assert receipt.received_at >= row.due_at  # never early
    finally:
        runner.stop()
    assert Receipt.objects.filter(message_id__startswith=f"{task_id}#").count() == 1  # once

    assert b.post("/api/endpoints/", {"name": "tasks", "handler": "celery_queue"}, format="json").status_code == 201
    refused = b.post("/api/messages/", {"endpoint": "tasks", "delay_seconds": 1,
                                        "payload": {"task": "testapp.plain_receipt", "args": ["nope"]}}, format="json")
    assert refused.status_code == 400 and "not allowed for team" in refused.json()["payload"][0]
    assert not ScheduledMessage.objects.filter(endpoint__team=b.key.row.team).exists()

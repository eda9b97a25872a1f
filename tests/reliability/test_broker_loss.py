"""The broker loses what it holds mid-delay (every queue of the vhost purged: a node's disk, a vhost
emptied, a cluster rebuilt): every message still arrives, once, from the rows. The rescue
(scheduling/messages/rescue.py) publishes each row overdue by DELAY_RESCUE_AFTER_MS again, for
every handler: record-only, a webhook (a real receiver, counting its calls per webhook-id), and
Celery-queue endpoints run by real Celery workers, both the in-project ``DelayedTask`` (the
platform's worker, its claim hook) and the Python client's ``PlatformTask`` (an outside app's
worker on its team's broker user, claiming through the API). Handler runs are counted where they
happen (receipts, the receiver's calls, the outside app's run log), not inferred from the rows.

The same Celery-queue endpoints with their workers down through the due time and their tasks lost
too: one copy of each waits in their queues (a queue with messages ready gets no more), each task
runs once when the workers are back, and a late second copy of each is skipped by the claim.

Reduced in make test (a few messages per handler); RELIABILITY_FULL=1 for more."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime, timezone

import pytest

import rabbit
from harness.platform import MANAGEMENT, TEAM, platform
from harness.recording_server import RecordingServer
from harness.waiting import wait_until
from scheduling.teams.broker_access import user_name
from tests.e2e.team_broker import ExtappWorker, extapp_env

from .conftest import Counts, size
from .faults import queue_of

pytestmark = [pytest.mark.broker, pytest.mark.e2e]
RESCUE_AFTER_MS = 1000
LEAD_SECONDS = size(60, 30)  # scheduling every group (a Django process, an outside app's process) fits in it
LATE_BOUND_MS = 15_000  # generous: the rescue is ~1-2 s late; a busy machine's worker adds seconds

LATENESS_SQL = """
    SELECT m.id::text, m.status, m.delivery_count, m.lateness_ms, m.idempotency_key
    FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e ON e.id = m.endpoint_id
    WHERE e.name = %s
"""


def purge_every_queue(url: str) -> tuple[int, list[str]]:
    """Every queue of the vhost purged (AMQP queue.purge): the messages purged, and the queues
    left alone (exclusive ones: another connection's remote-control replies, which refuse it)."""
    broker = rabbit.Broker(url, MANAGEMENT)
    purged, left = 0, []
    queues = broker.management.queues(broker.vhost)
    with broker.session() as session:
        for queue in queues:
            if queue.get("exclusive"):
                left.append(queue["name"])
                continue
            purged += session.purge_queue(queue["name"])
    return purged, left


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def _schedule_delayed_tasks(p, due: float, n: int) -> list[str]:
    """n in-project DelayedTask runs due from ``due`` (epoch s), scheduled as a project's code does."""
    code = ("from datetime import datetime, timedelta, timezone\n"
            "from harness.testapp.tasks import delayed_receipt\n"
            f"due = datetime.fromtimestamp({due}, timezone.utc)\n"
            f"for i in range({n}):\n"
            "    print('task', delayed_receipt.apply_async(args=[i], eta=due + timedelta(milliseconds=97 * i)).id)\n")
    return [line.split()[1] for line in p.manage("shell", "-c", code).splitlines() if line.startswith("task ")]


def _schedule_platform_tasks(outside: ExtappWorker, due: float, n: int) -> list[str]:
    """n PlatformTask runs of the outside app, through the API as its code does."""
    code = ("from datetime import datetime, timedelta, timezone\n"
            "from extapp import tasks\n"
            f"due = datetime.fromtimestamp({due}, timezone.utc)\n"
            f"for i in range({n}):\n"
            "    print('task', tasks.record.apply_async(args=[f'lost-{i}'], eta=due + timedelta(milliseconds=89 * i)).id)\n")
    return [line.split()[1] for line in outside.run(code).splitlines() if line.startswith("task ")]


def _counts(p, endpoint: str, scenario: str, runs: Counter, key, only) -> Counts:
    """Counts of one endpoint's messages ``only`` (ids or task ids): ``runs`` maps what ``key(row)``
    gives to the handler's runs."""
    only = set(only)
    rows = [r for r in p.sql(LATENESS_SQL, endpoint) if r[0] in only or r[4] in only]
    late = sorted(r[3] for r in rows if r[1] == "delivered")
    return Counts(scenario=scenario, messages=len(rows),
                  lost=sum(1 for r in rows if r[1] != "delivered" or runs[key(r)] == 0),
                  duplicates_to_handler=sum(max(0, runs[key(r)] - 1) for r in rows),
                  duplicates_suppressed=sum(max(0, r[2] - 1) for r in rows),
                  early=0, worst_lateness_ms=late[-1] if late else None,
                  p99_lateness_ms=late[max(0, -(-99 * len(late) // 100) - 1)] if late else None,
                  note=f"best {late[0] if late else None} ms")


class Deployment:
    """The module's platform: its worker (delivery loop, rescue, beat; not the ``celery`` queue),
    a worker of the ``celery`` queue only (the in-project DelayedTask's, no delivery loop), the
    outside app's worker (PlatformTask, on its team's broker user), and a webhook receiver."""

    def __init__(self, p, receiver, tasks_worker, outside_env, folder):
        self.p, self.receiver, self.tasks_worker = p, receiver, tasks_worker
        self.outside_env, self.folder, self.runs_file = outside_env, folder, folder / "runs.jsonl"
        self.outside = self.start_outside()

    def start_outside(self) -> ExtappWorker:
        self.outside = ExtappWorker(self.outside_env, self.folder / "extapp-worker.log")
        return self.outside

    def runs(self) -> list[dict]:
        return _lines(self.runs_file)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    folder = tmp_path_factory.mktemp("broker-loss")
    with RecordingServer() as receiver, \
            platform(web_workers=2, settings="delayplatform.settings_test", DELAY_RESCUE_AFTER_MS=str(RESCUE_AFTER_MS),
                     DELAY_CELERY_TASK_ALLOWLIST="testapp.*,extapp.tasks.*") as p:
        p.start_worker(concurrency=2, extra_args=("-X", "celery"))
        tasks_worker = p.start_worker(name="tasks", concurrency=2, beat=False, extra_args=("-Q", "celery"),
                                      DELAY_DELIVERY_LOOP="off")
        p.api("POST", "/api/endpoints/", json={"name": "lost-record", "handler": "none"})
        p.api("POST", "/api/endpoints/", json={"name": "lost-webhook", "handler": "webhook",
                                                "handler_target": receiver.url})
        p.api("POST", "/api/endpoints/", json={"name": "lost-ext", "handler": "celery_queue"})
        # the user is the node's, not the vhost's: a user left by an earlier run is replaced, and removed after
        team_url = p.manage("team_broker_user", TEAM, "--rotate").splitlines()[-1]
        try:
            env = extapp_env(url=team_url, team=TEAM, queue=queue_of(p, "lost-ext"), runs=folder / "runs.jsonl",
                             platform_url=p.url, key=p.key)
            d = Deployment(p, receiver, tasks_worker, env, folder)
            try:
                yield d
            finally:
                d.outside.stop()
        finally:
            rabbit.Management(MANAGEMENT).delete_user(user_name(TEAM))


def test_every_queue_purged_mid_delay_every_handler_gets_each_message_once(deployment, report, rng):
    d, p, n = deployment, deployment.p, size(100, 8)
    due = time.time() + LEAD_SECONDS
    ids = {}
    for name in ("lost-record", "lost-webhook"):
        body = {"messages": [{"endpoint": name, "payload": {"n": i},
                              "deliver_at": datetime.fromtimestamp(due + rng.uniform(0, 3), timezone.utc)
                              .isoformat()} for i in range(n)]}
        ids[name] = [m["id"] for m in p.api("POST", "/api/messages/bulk/", json=body)["messages"]]
    delayed = _schedule_delayed_tasks(p, due, n)
    external = _schedule_platform_tasks(d.outside, due, n)
    assert len(delayed) == len(external) == n
    endpoints = ("lost-record", "lost-webhook", "celery", "lost-ext")
    total = 4 * n
    wait_until(lambda: sum(p.count_status(e, "published") for e in endpoints) == total, 30, 0.2,
               "every message published into the cascade")
    left_s = due - time.time()
    assert left_s > 1, f"scheduling took too long: the first messages were due {-left_s:.1f} s ago"
    purged, exclusive = purge_every_queue(p.env["BROKER_URL"])
    print(f"\npurged {purged} broker message(s) {left_s:.1f} s before the first due time "
          f"(exclusive queues left: {len(exclusive)})")
    assert purged > 0

    wait_until(lambda: sum(p.count_status(e, "delivered") for e in endpoints) == total, 60, 0.5,
               "every message delivered")
    time.sleep(2)  # a second copy that would run a handler again has its chance to show
    calls = Counter(r["headers"].get("webhook-id") for r in d.receiver.requests)
    receipts = Counter(row[0].split("#")[0] for row in p.sql("SELECT message_id FROM testapp_receipt"))
    ran = Counter(run["message_id"] for run in d.runs())
    counts = [  # record-only has no handler: its delivery, recorded once, is what it does
        report(_counts(p, "lost-record", "broker lost every queue mid-delay: record-only",
                       Counter(ids["lost-record"]), key=lambda r: r[0], only=ids["lost-record"])),
        report(_counts(p, "lost-webhook", "broker lost every queue mid-delay: webhook", calls, key=lambda r: r[0],
                       only=ids["lost-webhook"])),
        report(_counts(p, "celery", "broker lost every queue mid-delay: celery_queue, DelayedTask", receipts,
                       key=lambda r: r[4], only=delayed)),
        report(_counts(p, "lost-ext", "broker lost every queue mid-delay: celery_queue, PlatformTask (client)", ran,
                       key=lambda r: r[0], only=external)),
    ]
    for c in counts:
        assert c.messages == n and c.lost == 0 and c.duplicates_to_handler == 0, c
        # every copy was purged: each arrived through the rescue, so no sooner than its delay
        assert RESCUE_AFTER_MS <= int(c.note.split()[1]) and c.worst_lateness_ms <= LATE_BOUND_MS, c
    assert sorted(calls) == sorted(ids["lost-webhook"])  # nothing else called, each once (counted above)
    assert set(delayed) <= set(receipts) and set(external) <= {run["id"] for run in d.runs()}


DOWN_SECONDS = 8  # the task workers' outage past the due time


def _publish_again(p, keys: list[str]) -> int:
    """A copy of each row's task published as the rescue does (the original coming late, after the
    rescue's copy was run): how many the broker confirmed."""
    code = ("from django.utils import timezone\n"
            "from scheduling.config.conf import broker\n"
            "from scheduling.messages import wire\n"
            "from scheduling.models import ScheduledMessage\n"
            f"rows = ScheduledMessage.objects.select_related('endpoint', 'topology').filter(idempotency_key__in={keys!r})\n"
            "out = [wire.outgoing(row, row.topology.cascade, timezone.now(), margin_ms=0)[0] for row in rows]\n"
            "print('confirmed', len(broker().publish(out).confirmed))\n")
    return int(p.manage("shell", "-c", code).split("confirmed")[-1])


def test_task_workers_down_and_the_broker_lost_each_task_runs_once(deployment, report):
    """The task workers are down and the broker loses their tasks: their queues are empty, so each
    overdue task gets one copy there; then the queue has messages ready (its workers have not
    caught up) and no more copies come, however long they stay down (a copy every look would be 4
    a second). When the workers are back each task runs once. Then the originals turn up late (a
    copy of each published again): the claim skips them, on both paths, and no handler runs twice."""
    d, p, n = deployment, deployment.p, size(50, 6)
    runs_before = len(d.runs())
    receipts_before = p.sql("SELECT count(*) FROM testapp_receipt")[0][0]
    d.tasks_worker.stop()
    d.outside.stop()
    due = time.time() + size(45, 25)
    delayed = _schedule_delayed_tasks(p, due, n)
    external = _schedule_platform_tasks(d.outside, due, n)
    wait_until(lambda: p.count_status("celery", "published") >= n and p.count_status("lost-ext", "published") == n,
               30, 0.2, "every task published into the cascade")
    assert time.time() < due, "scheduling took too long: the tasks fell due before the purge"
    purge_every_queue(p.env["BROKER_URL"])
    wait_until(lambda: time.time() > due + 0.1 * n + DOWN_SECONDS, DOWN_SECONDS + 60, 0.2, "the outage")
    d.tasks_worker.start()
    d.start_outside()
    outage_s = time.time() - due  # until both are consuming again
    wait_until(lambda: p.count_status("celery", "published") + p.count_status("lost-ext", "published") == 0,
               60, 0.5, "every task claimed")
    time.sleep(2)  # any other copy in the queues reaches the workers

    def handed() -> dict[str, int]:
        return dict(p.sql("SELECT idempotency_key, delivery_count FROM scheduling_scheduledmessage "
                          "WHERE idempotency_key = ANY(%s)", delayed + external))

    rescued = handed()
    print(f"\nhand-overs per task -> tasks, after {outage_s:.1f} s down from the first due time (the originals "
          f"purged): {sorted(Counter(rescued.values()).items())}")
    assert min(rescued.values()) >= 1 and max(rescued.values()) <= 2, rescued  # one copy; two if one raced a claim
    assert _publish_again(p, delayed + external) == 2 * n
    wait_until(lambda: all(count == rescued[key] + 1 for key, count in handed().items()), 60, 0.5,
               "the late copies handed over")
    time.sleep(2)  # a handler that would run again has its chance to show
    receipts = Counter(row[0].split("#")[0] for row in p.sql("SELECT message_id FROM testapp_receipt"))
    ran = Counter(run["message_id"] for run in d.runs())
    assert {task: receipts[task] for task in delayed} == {task: 1 for task in delayed}
    assert len(d.runs()) - runs_before == n and p.sql("SELECT count(*) FROM testapp_receipt")[0][0] - receipts_before == n
    assert all(ran[m] == 1 for m in ran)
    report(Counts(scenario=f"celery_queue workers down {outage_s:.0f} s from due, their tasks lost, then every "
                           "original late (DelayedTask, PlatformTask)",
                  messages=2 * n, lost=0, duplicates_to_handler=0,
                  duplicates_suppressed=sum(handed().values()) - 2 * n, early=0, worst_lateness_ms=None))

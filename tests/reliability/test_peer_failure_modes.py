"""The failure modes of other systems built on the same cascade (issue 22; docs/operations/reliability.md,
"Failure modes of the peers"), each shown absent on v2 and v3 through the real broker:

- NServiceBus.RabbitMQ#1407: under at-least-once dead-lettering, one destination that cannot be
  routed stalls a delay level for every other destination;
- celery#9867 and celery#10111: a message dead-lettered through the same level queue again (a
  retried task) is dropped by the cycle detection of RabbitMQ before 4.0.1, or a task retried more
  than twice stays stuck;
- kombu#2556: the routing key grows with every retry;
- a message moved between two brokers with the same names, there and back, must still arrive
  (what x-death would make a cycle).

One platform per version (its own database, vhost, web server and worker) serves the module's
tests. Reduced in make test; RELIABILITY_FULL=1 (make test-reliability) runs the sizes the issue
names.
"""

from __future__ import annotations

import json

import pytest

from harness.platform import MANAGEMENT, manage, platform
from harness.vhosts import vhost_create, vhost_delete
from harness.waiting import wait_until
from rabbit import Management
from scheduling.config.conf import broker

from .conftest import FULL, size
from .faults import count_status, endpoint, outcome, queue_of, schedule, settle, wait_published, why_lost

pytestmark = [pytest.mark.broker, pytest.mark.e2e]

@pytest.fixture(scope="module", params=["v2", "v3"])
def versioned(request):
    """A platform whose default version (a Celery queue's endpoint, made on first use) is the param."""
    with platform(web_workers=2, settings="delayplatform.settings_test", DELAY_DEFAULT_VERSION=request.param) as p:
        p.version = request.param
        p.start_worker(concurrency=2)
        yield p


def test_an_unroutable_destination_does_not_stall_a_level_for_the_others(versioned, report, rng):
    """#1407: the victim's queue is deleted while its messages and another endpoint's share the
    levels. The last level passes the victim's to the unroutable queue (the delivery exchange's
    alternate exchange), where they are marked failed; the other endpoint's arrive on time."""
    p, version = versioned, versioned.version
    victim, other = endpoint(p, f"victim-{version}", topology=version), endpoint(p, f"other-{version}", topology=version)
    n = 150  # each, as the issue names; the two endpoints' messages interleave in every level
    delays = [round(rng.uniform(6, 14), 3) for _ in range(2 * n)]
    schedule(p, victim, delays[:n])
    schedule(p, other, delays[n:])
    wait_published(p, victim, n, timeout=30)
    wait_published(p, other, n, timeout=30)
    with broker(p.env["BROKER_URL"]).session() as session:
        session.delete_queue(queue_of(p, victim))
    settled = settle(p, other, n, timeout=60)
    wait_until(lambda: count_status(p, victim, "failed", "delivered") == n, 60, 0.5, "every victim message decided")
    reasons = dict(p.sql("SELECT m.status, count(*) FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e "
                         "ON e.id = m.endpoint_id WHERE e.name = %s AND (m.status = 'delivered' OR m.last_error LIKE "
                         "'unroutable: no queue is bound%%') GROUP BY 1", victim))
    counts = report(outcome(p, other, f"#1407: a deleted destination beside another, {version}",
                            note=f"the victim's: {reasons}"))
    assert settled and counts.lost == 0 and counts.early == 0, why_lost(p, other)
    # the stall would hold the other's messages for the broker's 180-s confirm timeout; on time is
    # 1.5 s at full size (run alone), and a busy make test machine gets a wider bound
    assert counts.p99_lateness_ms <= (1500 if FULL else 5000), f"the other endpoint's p99 {counts.p99_lateness_ms} ms"
    assert sum(reasons.values()) == n, f"victim messages without a definite state: {reasons}"  # failed with the reason


def test_a_task_retried_through_the_cascade_runs_each_time_and_nothing_grows(versioned):
    """celery#10111 / #9867 / kombu#2556: a DelayedTask retried 10 times (5 in make test: past the
    two that stuck, each 3 s) with a countdown of 3 s passes the levels of 1 s and 2 s each time.
    Every run happens (counted), each retry row is delivered once, and neither its routing key nor
    its task message grows with the retries."""
    p, version = versioned, versioned.version
    retries = size(10, 5)
    task_id = manage(p.env, "shell", "-c", "from harness.testapp.tasks import retry_until; "
                     f"print(retry_until.apply_async(args=[{retries}, 3], countdown=3).id)").strip().splitlines()[-1]
    runs_sql = "SELECT count(*) FROM testapp_receipt WHERE message_id LIKE %s"
    wait_until(lambda: p.sql(runs_sql, f"{task_id}#%")[0][0] >= retries + 1, 60 + retries * 8, 1, "every run")
    rows = p.sql("SELECT idempotency_key, status, delivery_count, routing_key, payload::text, t.name "
                 "FROM scheduling_scheduledmessage m JOIN scheduling_topologyversion t ON t.id = m.topology_id "
                 "WHERE idempotency_key LIKE %s ORDER BY created_at", f"{task_id}%")
    runs = sorted(json.loads(r[0])["retries"] for r in p.sql(
        "SELECT payload::text FROM testapp_receipt WHERE message_id LIKE %s", f"{task_id}#%"))
    assert runs == list(range(retries + 1)), runs  # each run once, none stuck, none dropped
    assert [r[0] for r in rows] == [task_id] + [f"{task_id}#retry{i}" for i in range(1, retries + 1)]
    assert all(r[1] == "delivered" and r[2] == 1 and r[5] == version for r in rows), [r[:3] for r in rows]
    keys = {len(r[3]) for r in rows}
    sizes = [len(json.dumps(json.loads(r[4])["celery"]["headers"], sort_keys=True)) for r in rows[1:]]
    assert len(keys) == 1, f"routing key lengths {keys}"  # the same countdown, the same key
    # the last retry's headers differ from retry 1's only by the counter's digits (and the ids' "#retry10")
    assert sizes[-1] - sizes[0] <= 8, f"task message headers grew from {sizes[0]} to {sizes[-1]} bytes"


def test_messages_moved_to_another_broker_and_back_arrive(versioned, report, rng):
    """A blue-green move there and back between two vhosts that share every name: the messages
    pass the same level queues' names twice. x-death is stripped on each move, so RabbitMQ's
    cycle detection (before 4.0.1) has nothing to drop them for."""
    p, version = versioned, versioned.version
    name = endpoint(p, f"moved-{version}", topology=version)
    n = size(300, 100)
    schedule(p, name, [round(rng.uniform(15, 22), 3) for _ in range(n)])  # all still waiting after both moves
    wait_published(p, name, n, timeout=30)
    here = p.env["BROKER_URL"]
    root, vhost = here.rsplit("/", 1)
    green = f"{root}/{vhost}-green"
    management = Management(MANAGEMENT)
    vhost_create(management=management, vhost=f"{vhost}-green")
    try:
        there = manage(p.env, "transfer_delays", "--to-broker", green, "--version", version)
        back = manage({**p.env, "BROKER_URL": green}, "transfer_delays", "--to-broker", here, "--version", version)
    finally:
        vhost_delete(management=management, vhost=f"{vhost}-green")
    assert f"{version} level queues now hold 0 message(s)" in there and f"{version} level queues now hold 0 message(s)" in back
    settled = settle(p, name, n, timeout=60)
    counts = report(outcome(p, name, f"moved to another broker and back, {version}",
                            note=f"there: {there.strip().splitlines()[-1]}; back: {back.strip().splitlines()[-1]}"))
    assert settled and counts.lost == 0 and counts.early == 0, why_lost(p, name)

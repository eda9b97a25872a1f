"""An endpoint's queue is deleted while its messages are in the cascade: they land in the
unroutable queue, are marked failed with the reason, nothing stays in a level queue; re-binding
and republishing delivers them."""

import pytest

from harness.platform import platform
from harness.waiting import wait_until
from scheduling.config.conf import broker
from topology import cascade

from .conftest import size
from .faults import count_status, endpoint, outcome, queue_of, schedule, settle

pytestmark = [pytest.mark.broker, pytest.mark.e2e]


@pytest.fixture(scope="module")
def shared_platform():
    """One platform for both versions' tests, each on an endpoint of its own (its messages, its
    queue and its version's levels counted apart)."""
    with platform(web_workers=2, settings="delayplatform.settings_test") as p:
        p.start_worker(concurrency=2)
        yield p


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_destination_queue_deleted_then_rebound_and_republished(shared_platform, report, rng, version):
    v = cascade.get_version(version)
    p = shared_platform
    name = endpoint(p, f"gone-{version}", topology=version)
    n = size(500, 200)
    ids = schedule(p, name, [round(rng.uniform(4, 12), 3) for _ in range(n)])
    wait_until(lambda: count_status(p, name, "published") == n, 30, 0.2, "all published")
    queue = queue_of(p, name)
    with broker(p.env["BROKER_URL"]).session() as conn:
        conn.delete_queue(queue)
        wait_until(lambda: count_status(p, name, "failed") == n, 60, 0.5, "every message marked failed")
        with_reason = p.sql("SELECT count(*) FROM scheduling_scheduledmessage WHERE last_error LIKE %s",
                            f"unroutable: no queue is bound for '{queue}' on {v.prefix}delay-delivery%")[0][0]
        stuck = sum(conn.queue_depth(cascade.level_name(v.prefix, level)) or 0
                    for level in range(28))
        unroutable = conn.queue_depth(cascade.unroutable_name(v.prefix))
    assert with_reason == n
    assert stuck == 0 and unroutable == 0  # drained, and nothing left in a level

    p.api("POST", f"/api/endpoints/{name}/activate/")  # re-binds the queue
    # "pending" is an honest answer too: the sweeper may hold the row (SKIP LOCKED) at that moment
    answers = [p.api("POST", f"/api/messages/{message_id}/republish/")["status"] for message_id in ids]
    assert set(answers) <= {"published", "pending"}, set(answers)
    settle(p, name, n, timeout=60)
    counts = report(outcome(p, name, f"destination queue deleted, then republished, {version}",
                            note="lateness counts from the original due time"))
    assert counts.lost == 0 and counts.early == 0

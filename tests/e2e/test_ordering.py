"""Ordering keys for real: the API -> the cascade -> two workers' delivery loops -> a webhook
receiver that holds each call 0.1 s and records when each began and ended. 3 keys x 20 messages due
at the same second, in one bulk request: per key never two calls at once and in the order sent;
across keys calls go side by side (no global lock). The same for Celery tasks (celery_task endpoint):
a key's next task starts only once the one before it ended in its worker (task_postrun); and for
tasks sent as data to a celery_queue endpoint, whose claim takes the key's turn (celery/turns.py)."""

import json
import os
from collections import defaultdict
from datetime import timedelta

import pytest
from django.db.models import Count
from django.utils import timezone

from harness.celery_worker import Worker
from harness.paths import ARTIFACTS
from harness.recording_server import RecordingServer
from harness.testapp.models import Receipt
from harness.waiting import wait_until
from scheduling.models import ScheduledMessage, default_team_id

pytestmark = [pytest.mark.e2e, pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status
KEYS, PER_KEY, HOLD = 3, 20, 0.1


def test_each_key_one_call_at_a_time_in_order_and_keys_side_by_side(platform, two_workers, endpoint_name,
                                                                    create_endpoint, schedule_bulk):
    with RecordingServer(hold_seconds=HOLD) as server:
        create_endpoint(handler="webhook", handler_target=server.url)
        due = (timezone.now() + timedelta(seconds=3)).isoformat()
        bulk = [{"endpoint": endpoint_name, "payload": {"key": k, "n": n}, "deliver_at": due, "ordering_key": f"k{k}"}
                for n in range(PER_KEY) for k in range(KEYS)]
        schedule_bulk(bulk)
        rows = ScheduledMessage.objects.filter(endpoint__name=endpoint_name)
        wait_until(lambda: rows.filter(status=Status.DELIVERED).count() == KEYS * PER_KEY, 40, 0.2,
                   "every message delivered")
        requests = list(server.requests)
    calls = defaultdict(list)
    for request in requests:
        body = json.loads(request["body"])
        calls[body["key"]].append((request["at"], request["ended"], body["n"]))
    for key, made in calls.items():
        made.sort()
        assert [n for *_, n in made] == list(range(PER_KEY)), f"key {key} out of order"  # once each, in order
        assert all(ended <= next_at for (_, ended, _), (next_at, _, _) in zip(made, made[1:])), \
            f"key {key}: two calls at once"
    assert server.most_in_flight >= 2  # the keys went side by side
    delivered = list(rows.values_list("lateness_ms", "waiting_since", "delivery_count"))
    assert {count for *_, count in delivered} == {1}
    assert sum(1 for _, since, _ in delivered if since is not None) >= KEYS * (PER_KEY - 2)  # most waited, visibly
    span = max(e for made in calls.values() for _, e, _ in made) - min(a for made in calls.values() for a, _, _ in made)
    print(f"\nordering: {KEYS} keys x {PER_KEY} over {span:.2f} s, most in flight {server.most_in_flight}")


def test_copies_that_wait_for_their_turn_do_not_strand_those_parked_behind_them(platform, two_workers, create_endpoint,
                                                                               schedule_bulk,
                                                                               endpoint_name):
    """max_concurrent 1: each loop hands its engine one call of the endpoint at a time and parks the
    rest of what is due. 3 keys x 5 messages due at one moment arrive in an order that is not their
    keys' (ties by id): a copy let through may find its key's head open and wait (acked, no call).
    The parked ones must still go: nothing may be left published with no call out (they stayed
    parked for good when the copy let through made no call, and none ended to unpark them)."""
    with RecordingServer(hold_seconds=0.02) as server:
        create_endpoint(handler="webhook", handler_target=server.url, max_concurrent=1)
        due = (timezone.now() + timedelta(seconds=3)).isoformat()
        bulk = [{"endpoint": endpoint_name, "payload": {"key": k, "n": n}, "deliver_at": due, "ordering_key": f"k{k}"}
                for n in range(5) for k in range(3)]
        schedule_bulk(bulk)
        rows = ScheduledMessage.objects.filter(endpoint__name=endpoint_name)
        try:
            wait_until(lambda: rows.filter(status=Status.DELIVERED).count() == 15, 60, 0.2, "every message delivered")
        except AssertionError:
            raise AssertionError(
                f"not all delivered: {dict(rows.values_list('status').annotate(n=Count('id')))}") from None
        assert server.most_in_flight == 1 and len(server.requests) == 15


def test_a_key_s_celery_tasks_run_one_after_the_other(platform, two_workers, endpoint_name, create_endpoint,
                                                      schedule_bulk):
    create_endpoint(handler="celery_task", handler_target="testapp.held_receipt")
    due = (timezone.now() + timedelta(seconds=3)).isoformat()
    per_key = 6
    bulk = [{"endpoint": endpoint_name, "payload": {"key": k, "n": n, "hold": 0.2}, "deliver_at": due,
             "ordering_key": f"k{k}"} for n in range(per_key) for k in range(2)]
    ids = schedule_bulk(bulk)
    wait_until(lambda: Receipt.objects.filter(message_id__in=ids).count() == len(ids), 40, 0.2, "every task ran")
    runs = defaultdict(list)
    for payload in Receipt.objects.filter(message_id__in=ids).values_list("payload", flat=True):
        runs[payload["key"]].append((payload["started"], payload["ended"], payload["n"]))
    for key, made in runs.items():
        made.sort()
        assert [n for *_, n in made] == list(range(per_key)), f"key {key} out of order"
        assert all(ended <= next_started for (_, ended, _), (next_started, _, _) in zip(made, made[1:])), \
            f"key {key}: two tasks at once"


@pytest.fixture(scope="module")
def queue_worker(worker_env, provisioned):
    """The platform's worker, also consuming the celery_queue endpoint's queue (its tasks run here,
    claimed by the platform's before_start hook), 4 processes so that keys can go side by side."""
    run_id = os.environ["DP_TEST_RUN_ID"]
    w = Worker(f"ordering-q-{run_id}", worker_env, ARTIFACTS / f"worker-{run_id}-ordering-q.log", concurrency=4,
               extra_args=("-Q", f"celery,dp.relay,default--{QUEUE_ENDPOINT}")).start()
    yield w
    w.stop()


QUEUE_ENDPOINT = "ordered-tasks"


def test_a_key_s_celery_queue_tasks_run_one_after_the_other_keys_side_by_side(api, platform, queue_worker,
                                                                            schedule_bulk):
    default_team_id()  # the default team with its grants (testapp.* tasks)
    created = api.post("/api/endpoints/", {"name": QUEUE_ENDPOINT, "topology": "v3", "handler": "celery_queue",
                                           "team": "default"}, format="json")
    assert created.status_code == 201, created.content
    due = (timezone.now() + timedelta(seconds=3)).isoformat()
    keys, per_key = 2, 6
    bulk = [{"endpoint": QUEUE_ENDPOINT, "team": "default", "deliver_at": due, "ordering_key": f"q{k}",
             "payload": {"task": "testapp.held_receipt", "args": [{"key": k, "n": n, "hold": 0.2}], "id": f"q{k}-{n}"}}
            for n in range(per_key) for k in range(keys)]
    ids = schedule_bulk(bulk)
    task_ids = [item["payload"]["id"] for item in bulk]
    wait_until(lambda: Receipt.objects.filter(message_id__in=task_ids).count() == len(ids), 60, 0.2, "every task ran")
    runs = defaultdict(list)
    for payload in Receipt.objects.filter(message_id__in=task_ids).values_list("payload", flat=True):
        runs[payload["key"]].append((payload["started"], payload["ended"], payload["n"]))
    assert len(runs) == keys
    for key, made in runs.items():
        made.sort()
        assert [n for *_, n in made] == list(range(per_key)), f"key {key} out of order (or a task ran twice)"
        assert all(ended <= next_started for (_, ended, _), (next_started, _, _) in zip(made, made[1:])), \
            f"key {key}: two tasks at once"
    spans = [(a, e) for made in runs.values() for a, e, _ in made]
    side_by_side = any(a0 < e1 and a1 < e0 for a0, e0, _ in runs[0] for a1, e1, _ in runs[1])
    assert side_by_side, "the two keys never ran at the same time (a global lock?)"
    rows = ScheduledMessage.objects.filter(id__in=ids)
    assert set(rows.values_list("status", flat=True)) == {Status.DELIVERED}
    assert rows.exclude(waiting_since=None).count() >= keys * (per_key - 2)  # most waited, visibly
    span = max(e for _, e in spans) - min(a for a, _ in spans)
    print(f"\ncelery_queue ordering: {keys} keys x {per_key} tasks of 0.2 s over {span:.2f} s")

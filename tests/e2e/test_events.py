"""Fan-out against the real worker (issue 48): an event to a topic with subscriptions -- one
filtered out by its filter, a webhook (a local receiver counting calls per webhook-id), a
record-only endpoint, a Celery queue (a real Celery worker consuming it) -- is delivered to exactly
the matching ones, once each; another team's subscription to the same topic never matches;
cancelling a delayed event cancels its waiting messages and none is delivered (an event due after
them, delivered, shows the worker was there to deliver them)."""

import os
from collections import Counter

import pytest

from harness.celery_worker import Worker, celery_drained
from harness.paths import ARTIFACTS
from harness.recording_server import RecordingServer
from harness.testapp.models import Receipt
from harness.waiting import wait_until
from scheduling.models import ScheduledMessage, default_team_id
from tests.conftest import team_named

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status
TASKS = "ev-tasks"  # the Celery queue endpoint: its queue default--ev-tasks, consumed by the module's worker


@pytest.fixture(scope="module")
def fanout_worker(worker_env, provisioned):
    """The platform's worker, also consuming the Celery queue endpoint's queue (its tasks run here)."""
    run_id = os.environ["DP_TEST_RUN_ID"]
    w = Worker(f"events-{run_id}", worker_env, ARTIFACTS / f"worker-{run_id}-events.log",
               extra_args=("-Q", f"celery,dp.relay,default--{TASKS}")).start()
    yield w
    w.stop()


def make(api, **body):
    response = api.post("/api/endpoints/", {"topology": "v3", **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def subscribe(api, **body):
    response = api.post("/api/subscriptions/", body, format="json")
    assert response.status_code == 201, response.content


def publish(api, **body):
    response = api.post("/api/events/", {"team": "default", **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def settled(ids, statuses):
    def check():
        rows = list(ScheduledMessage.objects.filter(id__in=ids))
        return rows if len(rows) == len(ids) and all(r.status in statuses for r in rows) else None
    return check


@pytest.fixture
def world(api, platform, fanout_worker):
    """default: a webhook (filter region eu), a record-only endpoint, a Celery queue, and an
    endpoint whose filter (region us) leaves it out, all on invoice.#; other: a webhook on
    invoice.paid, to the same receiver."""
    default_team_id(), team_named("other")  # the default team with its grants (testapp.* tasks)
    with RecordingServer() as ours, RecordingServer() as theirs:
        make(api, team="default", name="ev-hook", handler="webhook", handler_target=ours.url)
        make(api, team="default", name="ev-record", handler="none")
        make(api, team="default", name=TASKS, handler="celery_queue")
        make(api, team="default", name="ev-filtered", handler="webhook", handler_target=ours.url)
        make(api, team="other", name="ev-theirs", handler="webhook", handler_target=theirs.url)
        subscribe(api, team="default", topic="invoice.#", endpoint="ev-hook", filter={"kwargs.region": "eu"})
        subscribe(api, team="default", topic="invoice.*", endpoint="ev-record")
        subscribe(api, team="default", topic="#.paid", endpoint=TASKS)
        subscribe(api, team="default", topic="invoice.#", endpoint="ev-filtered", filter={"kwargs.region": ["us"]})
        subscribe(api, team="other", topic="invoice.paid", endpoint="ev-theirs")
        yield ours, theirs


def test_an_event_reaches_exactly_its_matching_subscriptions_once_each(api, world):
    ours, theirs = world
    event = publish(api, topic="invoice.paid", delay_seconds=1,
                    payload={"task": "testapp.plain_receipt", "args": ["fan-out"], "kwargs": {"region": "eu"}})
    made = {m["endpoint"]: m["id"] for m in event["messages"]}
    assert sorted(made) == sorted(["ev-hook", "ev-record", TASKS])
    wait_until(settled(list(made.values()), (Status.DELIVERED,)), timeout=60, message="the event's messages")
    wait_until(lambda: Receipt.objects.filter(payload__args=["fan-out"]).exists(), timeout=60,
               message="the Celery worker to run the task")
    celery_drained()
    calls = Counter(r["headers"]["webhook-id"] for r in ours.requests)
    assert calls == {made["ev-hook"]: 1}  # the filtered-out endpoint, on the same receiver, got nothing
    assert ours.bodies()[0]["kwargs"] == {"region": "eu"}
    assert Receipt.objects.filter(payload__args=["fan-out"]).count() == 1  # the task ran once
    assert theirs.requests == []  # another team's subscription to the same topic never matched
    assert not ScheduledMessage.objects.filter(endpoint__team__name="other").exists()
    record = ScheduledMessage.objects.get(pk=made["ev-record"])
    assert record.delivery_count == 1 and str(record.event_id) == event["id"]
    assert api.get(f"/api/messages/{made['ev-hook']}/").json()["event"] == event["id"]


def test_cancelling_a_delayed_event_cancels_its_waiting_messages(api, world):
    ours, _ = world
    payload = {"task": "testapp.plain_receipt", "args": ["cancelled"], "kwargs": {"region": "eu"}}
    event = publish(api, topic="invoice.paid", delay_seconds=3, payload=payload)
    ids = [m["id"] for m in event["messages"]]
    assert len(ids) == 3
    answer = api.post(f"/api/events/{event['id']}/cancel/")
    assert answer.status_code == 200 and answer.json() == {"cancelled": 3}
    # a later event to the webhook: once it is delivered, the cancelled ones were due long before
    control = publish(api, topic="invoice.sent", delay_seconds=6, payload={"kwargs": {"region": "eu"}})
    (control_id,) = [m["id"] for m in control["messages"] if m["endpoint"] == "ev-hook"]
    wait_until(settled([control_id], (Status.DELIVERED,)), timeout=60, message="the control event's message")
    celery_drained()
    assert [r["headers"]["webhook-id"] for r in ours.requests] == [control_id]
    assert not Receipt.objects.filter(payload__args=["cancelled"]).exists()
    assert set(ScheduledMessage.objects.filter(id__in=ids).values_list("status", flat=True)) == {Status.CANCELLED}
    assert api.post(f"/api/events/{event['id']}/cancel/").json() == {"cancelled": 0}

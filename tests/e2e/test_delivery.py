"""The whole path for real: API -> outbox -> relay -> RabbitMQ cascade -> Celery worker ->
handler, with the worker as a separate process on this run's vhost and database. Every test
runs on v2 (the seeds' topic cascade) and on v3 (the platform's direct cascade) twice: with
envelopes (the default) and one broker message per message (DELAY_ENVELOPES off)."""

import base64
import hashlib
import hmac
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from unittest import mock

import pytest
from django.utils import timezone
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from harness.celery_worker import celery_drained
from harness.paths import ROOT
from harness.recording_server import RecordingServer
from harness.testapp.models import Receipt
from harness.waiting import wait_until
from scheduling.config.conf import conf
from scheduling.endpoints.services import endpoint_bind
from scheduling.messages import wire
from scheduling.messages.dashboard import dashboard_get
from scheduling.models import Endpoint, ScheduledMessage
from tests.topology.helpers import get
from topology import cascade

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status


@pytest.fixture(params=["v2", "v3", "v3-per-message"])
def version(request, settings):
    """The topology's name; the relay in this process packs envelopes unless the id says not to."""
    settings.DELAY_ENVELOPES = not request.param.endswith("-per-message")
    return request.param.removesuffix("-per-message")


@pytest.fixture
def make_endpoint(api, platform, worker, version):
    """Endpoints on the test's version get unique names; their queues go with the run's vhost
    (deleting a queue a worker consumes makes it reconnect, which other tests would feel)."""

    def make(name, **body):
        response = api.post("/api/endpoints/", {"name": name, "topology": version, **body}, format="json")
        assert response.status_code == 201, response.content
        return name

    return make


def queue_of(name: str) -> str:
    """The endpoint's queue: its team's (``default--<name>``), which its routing keys name."""
    return Endpoint.objects.get(name=name).queue


def schedule(api, endpoint, **body):
    response = api.post("/api/messages/", {"endpoint": endpoint, "payload": body.pop("payload", {}), **body},
                        format="json")
    assert response.status_code in (200, 201), response.content
    return response.json()["id"]


def settled(ids, statuses=(Status.DELIVERED,)):
    def check():
        rows = list(ScheduledMessage.objects.filter(id__in=ids))
        return rows if len(rows) == len(ids) and all(r.status in statuses for r in rows) else None

    return check


def test_delays_from_zero_to_five_seconds_arrive_on_time_never_early(api, make_endpoint, endpoint_name):
    name = make_endpoint(endpoint_name)
    delays = [0, 0.001, 0.1, 0.5, 0.999, 1, 1.25, 1.5, 2, 2.5, 3, 3.333, 3.75, 4, 4.5, 5]
    response = api.post("/api/messages/bulk/", {"messages": [
        {"endpoint": name, "payload": {"delay": d}, "delay_seconds": d} for d in delays]}, format="json")
    assert response.status_code == 201
    ids = [m["id"] for m in response.json()["messages"]]
    past = schedule(api, name, deliver_at=(timezone.now() - timedelta(days=1)).isoformat())
    rows = wait_until(settled([*ids, past]), timeout=30, message="every message delivered")
    overdue = next(r for r in rows if str(r.id) == past)
    for row in rows:
        assert row.delivered_at >= row.due_at, f"{row.payload} delivered early"
        assert row.delivery_count == 1 and row.published_at is not None
        assert 0 <= row.lateness_ms < 5000, f"{row.payload}: {row.lateness_ms} ms late"  # a bound a busy machine keeps
    # asked for a day ago: delivered at once, late only by what the platform added, and counted apart
    assert overdue.delivered_at - overdue.created_at < timedelta(seconds=5)
    assert overdue.due_at < overdue.created_at - timedelta(hours=23)  # the requested time is kept
    assert [api.get(f"/api/messages/{i}/").json()["scheduled_in_past"] for i in (past, ids[0])] == [True, False]
    board = dashboard_get()
    assert board.in_past == [("last hour", 1), ("last 24 hours", 1)]
    assert board.last_hour.count == len(rows) and board.last_hour.max_ms < 5000  # p99 not polluted


def test_cancelled_message_never_reaches_its_handler(api, make_endpoint, endpoint_name):
    """A webhook runs inside the delivery, before its commit: once the cancelled message's
    hand-over is recorded (delivery_count 1), any call it could have made has been made."""
    with RecordingServer() as server:
        name = make_endpoint(endpoint_name, handler="webhook", handler_target=server.url)
        keep = schedule(api, name, payload={"keep": True}, delay_seconds=3)
        drop = schedule(api, name, payload={"keep": False}, delay_seconds=3)
        wait_until(settled([drop], (Status.PUBLISHED,)), 5, message="the message to be in the cascade")
        assert api.post(f"/api/messages/{drop}/cancel/").json()["status"] == "cancelled"
        wait_until(settled([keep]), timeout=15, message="the kept message")
        # the cancelled one comes out of the cascade too, and is dropped there
        wait_until(lambda: ScheduledMessage.objects.get(id=drop).delivery_count == 1, 10, message="drop seen")
    assert [r["headers"]["X-Delay-Message-Id"] for r in server.requests] == [keep]
    dropped = ScheduledMessage.objects.get(id=drop)
    assert dropped.status == Status.CANCELLED and dropped.delivered_at is None


def test_idempotency_key_schedules_once(api, make_endpoint, endpoint_name):
    name = make_endpoint(endpoint_name, handler="celery_task", handler_target="testapp.record_receipt")
    ids = {schedule(api, name, payload={"n": 1}, delay_seconds=1, idempotency_key="once") for _ in range(3)}
    assert len(ids) == 1
    wait_until(settled(list(ids)), timeout=10)
    celery_drained()
    assert list(Receipt.objects.values_list("message_id", flat=True)) == list(ids)


def test_celery_task_handler_runs_exactly_once_per_message(api, make_endpoint, endpoint_name):
    name = make_endpoint(endpoint_name, handler="celery_task", handler_target="testapp.record_receipt")
    ids = [schedule(api, name, payload={"n": n}, delay_seconds=n / 4) for n in range(8)]
    wait_until(settled(ids), timeout=15)
    celery_drained()
    receipts = sorted((r.message_id, r.payload["n"]) for r in Receipt.objects.all())
    assert receipts == sorted((i, n) for n, i in enumerate(ids))  # each message's handler ran exactly once


def test_a_message_moved_earlier_and_one_moved_later_each_arrive_once_at_the_new_time(api, make_endpoint,
                                                                                       endpoint_name):
    """PATCH with a new time: the copy for the new time delivers; the copy for the old one, still
    in the cascade, is dropped when it arrives (the later one's old copy comes first, at 1.5 s)."""
    name = make_endpoint(endpoint_name, handler="celery_task", handler_target="testapp.record_receipt")
    earlier, later = schedule(api, name, delay_seconds=6), schedule(api, name, delay_seconds=1.5)
    wait_until(settled([earlier, later], (Status.PUBLISHED,)), 5, message="both published")
    for message_id, delay in ((earlier, 2.5), (later, 4)):
        moved = api.patch(f"/api/messages/{message_id}/", {"delay_seconds": delay}, format="json")
        assert moved.status_code == 200, moved.content
    rows = wait_until(settled([earlier, later]), 20, message="both delivered")
    wait_until(lambda: Receipt.objects.count() >= 2, 10, message="both handlers ran")
    time.sleep(6 - 2.5)  # the earlier one's old copy (due at 6 s) has come and gone
    celery_drained()
    assert sorted(Receipt.objects.values_list("message_id", flat=True)) == sorted([earlier, later])  # once each
    for row in ScheduledMessage.objects.filter(id__in=[earlier, later]):
        old_due = datetime.fromisoformat(row.due_history[0]["due_at"].replace("Z", "+00:00"))
        assert row.delivered_at >= row.due_at and 0 <= row.lateness_ms < 2500  # at the new time
        assert row.delivery_count == 1  # the old copy was no hand-over
        assert (row.due_at < old_due) == (str(row.id) == earlier)
    assert len(rows) == 2


def test_two_copies_in_the_endpoint_queue_run_the_handler_once(api, make_endpoint, endpoint_name, amqp):
    """An at-least-once hand-over repeated: a second copy of the same message lands in the
    endpoint's queue beside the one coming out of the cascade; both are held until due."""
    with RecordingServer() as server:
        name = make_endpoint(endpoint_name, handler="webhook", handler_target=server.url)
        message_id = schedule(api, name, payload={"copies": 2}, delay_seconds=2.5)
        (row,) = wait_until(settled([message_id], (Status.PUBLISHED,)), 5, message="published")
        copy, _ = wire.outgoing(row, row.topology.cascade, timezone.now(), direct=True,
                                margin_ms=conf().arrival_margin_ms)
        assert amqp.publish([copy]).confirmed == {0}
        wait_until(lambda: ScheduledMessage.objects.get(id=message_id).delivery_count == 2, 15,
                   message="both copies handed over")
    row = ScheduledMessage.objects.get(id=message_id)
    assert row.status == Status.DELIVERED and row.delivered_at >= row.due_at
    assert [r["headers"]["X-Delay-Message-Id"] for r in server.requests] == [message_id]


def test_a_copy_the_broker_lost_is_rescued_once_and_the_late_one_suppressed(api, make_endpoint, endpoint_name, amqp):
    """The broker loses the message's copy in the cascade (taken out of its level queue, as a
    stalled dead-letter worker holds it or an at-most-once hop drops it): the worker's loop, idle,
    publishes a copy to the delivery exchange once it is DELAY_RESCUE_AFTER_MS overdue. The lost copy turning up
    after all is a duplicate: the handler runs once."""
    name = make_endpoint(endpoint_name, handler="celery_task", handler_target="testapp.record_receipt")
    message_id = schedule(api, name, payload={"lost": True}, delay_seconds=6)
    (row,) = wait_until(settled([message_id], (Status.PUBLISHED,)), 5, message="published")
    lost = get(amqp, row.first_exchange)  # a level's exchange and queue share the name
    assert lost is not None and wire.carried_ids(lost.headers, lost.body) == [message_id]
    (row,) = wait_until(settled([message_id]), timeout=30, message="the rescued copy delivered")
    assert row.delivered_at >= row.due_at and conf().rescue_after_ms <= row.lateness_ms < 15_000
    late, _ = wire.outgoing(row, row.topology.cascade, timezone.now(), direct=True, margin_ms=0)
    assert amqp.publish([late]).confirmed == {0}
    wait_until(lambda: ScheduledMessage.objects.get(id=message_id).delivery_count == 2, 15,
               message="the late copy handed over")
    celery_drained()
    assert list(Receipt.objects.values_list("message_id", flat=True)) == [message_id]


def test_webhook_handler_posts_signed_json_once_per_message(api, make_endpoint, endpoint_name, version):
    """Standard Webhooks: the receiver verifies each request with the published library and the
    secret the create call answered, and refuses the same request replayed 6 minutes later."""
    with RecordingServer() as server:
        response = api.post("/api/endpoints/", {"name": endpoint_name, "topology": version,
                                                "handler": "webhook", "handler_target": server.url}, format="json")
        assert response.status_code == 201, response.content
        secret = response.json()["webhook_secret"]
        ids = [schedule(api, endpoint_name, payload={"n": n}, delay_seconds=0.5 + n / 2) for n in range(4)]
        wait_until(settled(ids), timeout=15)
    assert sorted(r["headers"]["webhook-id"] for r in server.requests) == sorted(ids)
    assert server.connections() < len(ids)  # keep-alive: the worker's calls to one origin share connections
    assert [Webhook(secret).verify(r["body"], r["headers"]) for r in server.requests] == server.bodies()
    assert sorted(b["n"] for b in server.bodies()) == [0, 1, 2, 3]
    key = base64.b64decode(secret.removeprefix("whsec_"))
    for request in server.requests:
        assert request["headers"]["X-Delay-Signature"] == \
            "sha256=" + hmac.new(key, request["body"], hashlib.sha256).hexdigest()
    replay = server.requests[0]
    with mock.patch("standardwebhooks.webhooks.datetime") as clock:  # the receiver's clock, 6 minutes on
        clock.now.return_value = datetime.now(tz=dt_timezone.utc) + timedelta(minutes=6)
        clock.fromtimestamp.side_effect = datetime.fromtimestamp
        with pytest.raises(WebhookVerificationError, match="too old"):
            Webhook(secret).verify(replay["body"], replay["headers"])


def test_failing_webhook_is_retried_through_the_delivery_exchange(api, make_endpoint, endpoint_name, settings):
    with RecordingServer(fail_first=1) as server:
        name = make_endpoint(endpoint_name, handler="webhook", handler_target=server.url)
        message_id = schedule(api, name, payload={"retry": 1}, delay_seconds=0.5)
        (row,) = wait_until(settled([message_id]), timeout=20, message="delivered after one retry")
    assert len(server.requests) == 2 and row.attempts == 1 and row.delivery_count == 1
    assert "webhook answered 500" in row.last_error


def test_scheduled_while_broker_refuses_is_published_by_the_sweeper(make_endpoint, endpoint_name, worker_env):
    name = make_endpoint(endpoint_name)
    env = {**worker_env, "BROKER_URL": "amqp://guest:guest@127.0.0.1:1//"}
    result = subprocess.run(
        [sys.executable, "manage.py", "schedule_message", name, "--delay", "1.5", "--payload", '{"outbox": 1}'],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "stay pending for the sweeper" in result.stderr
    message_id = result.stdout.split()[0]
    assert result.stdout.split()[1] == "pending"
    (row,) = wait_until(settled([message_id]), timeout=20, message="the sweeper to publish it")
    assert row.delivered_at >= row.due_at and row.delivery_count == 1


def test_unroutable_message_fails_with_a_reason_and_republish_delivers_it(api, make_endpoint, endpoint_name, amqp,
                                                                          platform):
    name = make_endpoint(endpoint_name)
    for row in platform.values():
        amqp.unbind(cascade.endpoint_binding(row.cascade, queue_of(name)))
    message_id = schedule(api, name, delay_seconds=1)
    (row,) = wait_until(settled([message_id], (Status.FAILED,)), timeout=20, message="marked failed")
    assert "unroutable: no queue is bound" in row.last_error
    endpoint_bind(endpoint=Endpoint.objects.get(name=name))
    assert api.post(f"/api/messages/{message_id}/republish/").json()["status"] == "published"  # at once
    (row,) = wait_until(settled([message_id]), timeout=15, message="delivered after republish")
    assert row.delivery_count == 1


def test_a_dotted_name_gets_its_messages_and_a_name_sharing_its_suffix_does_not(api, make_endpoint, endpoint_name,
                                                                               version):
    if version != "v3":
        response = api.post("/api/endpoints/", {"name": f"{endpoint_name}.eu", "topology": version}, format="json")
        assert response.status_code == 400 and "dotted name" in response.json()["topology"][0]
        return
    dotted, suffix = make_endpoint(f"orders.{endpoint_name}.eu"), make_endpoint(f"{endpoint_name}.eu")
    to_dotted = [schedule(api, dotted, payload={"to": "dotted"}, delay_seconds=d) for d in (0, 1.5)]
    to_suffix = [schedule(api, suffix, payload={"to": "suffix"}, delay_seconds=d) for d in (0, 1.5)]
    rows = wait_until(settled(to_dotted + to_suffix), timeout=20, message="all four delivered")
    assert all(r.delivery_count == 1 and r.delivered_at >= r.due_at for r in rows)
    assert {str(r.id): r.routing_key for r in rows} == {**{i: queue_of(dotted) for i in to_dotted},
                                                        **{i: queue_of(suffix) for i in to_suffix}}


@pytest.fixture(autouse=True)
def _show_worker_log_on_failure(request, worker):
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed and os.environ.get("CI_SHOW_WORKER_LOG"):
        print(worker.log_text()[-5000:])

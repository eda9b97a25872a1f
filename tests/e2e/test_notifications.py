"""Notifications and callbacks against a real worker and real webhook receivers (issue 48): a
webhook failing until its retries end sends message.attempt_failing (its 4th failed attempt) and
message.failed to the team's notification endpoint, each once and signed with that endpoint's
secret (Standard Webhooks, checked here with the standard library); callbacks arrive for both
outcomes, once each; an endpoint failing past DELAY_WEBHOOK_DISABLE_AFTER sends endpoint.disabled.
One worker of the module's own, with the settings that make retries and disabling fast."""

import base64
import hashlib
import hmac
import json
import os
import time
from collections import Counter

import pytest

from harness.celery_worker import Worker
from harness.paths import ARTIFACTS
from harness.recording_server import RecordingServer
from harness.waiting import wait_until
from scheduling.models import Endpoint, ScheduledMessage

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status
SETTINGS = {"DELAY_HANDLER_MAX_RETRIES": "4", "DELAY_HANDLER_BACKOFF_SECONDS": "0.1",
            "DELAY_WEBHOOK_DISABLE_AFTER": "4s", "DELAY_WEBHOOK_CIRCUIT_FAILURES": "0"}


@pytest.fixture(scope="module")
def notify_worker(worker_env):
    run_id = os.environ["DP_TEST_RUN_ID"]
    worker = Worker(f"notifications-{run_id}", {**worker_env, **SETTINGS},
                    ARTIFACTS / f"worker-{run_id}-notifications.log").start()
    yield worker
    worker.stop()


def endpoint(client, name: str, url: str) -> str:
    """The endpoint's signing secret (answered once, at creation)."""
    response = client.post("/api/endpoints/", {"name": name, "topology": "v3", "handler": "webhook",
                                               "handler_target": url}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["webhook_secret"]


def schedule(client, name: str, delay: float, **callbacks) -> str:
    response = client.post("/api/messages/", {"endpoint": name, "payload": {"n": 1}, "delay_seconds": delay,
                                              **callbacks}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def verified(request: dict, secret: str) -> dict:
    """The body, once its Standard Webhooks signature checks out with ``secret`` (whsec_<base64 key>)."""
    headers = {k.lower(): v for k, v in request["headers"].items()}
    key = base64.b64decode(secret.removeprefix("whsec_") + "==")
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + request["body"]
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert f"v1,{expected}" in headers["webhook-signature"].split(), "signature does not verify"
    body = json.loads(request["body"])
    assert headers["webhook-id"] == body["id"]  # the notification's id is its message's
    return body


def settle(server: RecordingServer, seconds: float = 1.5) -> None:
    """Nothing more arrives for ``seconds`` (a second copy would have)."""
    seen = len(server.requests)
    time.sleep(seconds)
    assert len(server.requests) == seen, "more notifications arrived than expected"


def test_a_webhook_giving_up_sends_attempt_failing_then_failed_signed(api, platform, notify_worker, endpoint_name):
    with RecordingServer(fail_first=10**6) as flaky, RecordingServer() as notes:
        endpoint(api, f"{endpoint_name}-flaky", flaky.url)
        secret = endpoint(api, f"{endpoint_name}-notes", notes.url)
        route = api.post("/api/notifications/", {"endpoint": f"{endpoint_name}-notes",
                                                 "events": ["message.failed", "message.attempt_failing"]},
                         format="json")
        assert route.status_code == 201, route.content
        message_id = schedule(api, f"{endpoint_name}-flaky", 0.2)
        wait_until(lambda: len(notes.requests) >= 2, 60, 0.1, "both notifications")
        settle(notes)
        bodies = [verified(r, secret) for r in notes.requests]
    assert [b["type"] for b in bodies] == ["message.attempt_failing", "message.failed"]
    failing, failed = bodies
    assert failing["message"]["id"] == failed["message"]["id"] == message_id
    assert failing["message"]["attempts"] == 4 and failing["message"]["status"] == "published"
    assert failed["message"]["attempts"] == 5 and failed["message"]["status"] == "failed"
    assert failed["message"]["last_status_code"] == 500 and failed["message"]["failed_at"]
    assert len(flaky.requests) == 5  # the first attempt and its 4 retries
    rows = ScheduledMessage.objects.filter(notification__isnull=False, endpoint__name=f"{endpoint_name}-notes")
    assert sorted(rows.values_list("notification", "status")) == [("message.attempt_failing", "delivered"),
                                                                  ("message.failed", "delivered")]


def test_callbacks_arrive_for_both_outcomes_once_each(api, platform, notify_worker, endpoint_name):
    with RecordingServer(fail_first=10**6) as flaky, RecordingServer() as fine, RecordingServer() as outcomes:
        endpoint(api, f"{endpoint_name}-flaky", flaky.url)
        endpoint(api, f"{endpoint_name}-fine", fine.url)
        secret = endpoint(api, f"{endpoint_name}-outcomes", outcomes.url)
        done = schedule(api, f"{endpoint_name}-fine", 0.2, on_delivered=f"{endpoint_name}-outcomes",
                        on_failed=f"{endpoint_name}-outcomes")
        gave_up = schedule(api, f"{endpoint_name}-flaky", 0.2, on_delivered=f"{endpoint_name}-outcomes",
                           on_failed=f"{endpoint_name}-outcomes")
        wait_until(lambda: len(outcomes.requests) >= 2, 60, 0.1, "both callbacks")
        settle(outcomes)
        bodies = {b["message"]["id"]: b for b in (verified(r, secret) for r in outcomes.requests)}
    assert Counter(b["message"]["id"] for b in bodies.values()) == {done: 1, gave_up: 1}
    assert bodies[done]["type"] == "message.delivered" and bodies[done]["message"]["status"] == "delivered"
    assert bodies[done]["message"]["delivered_at"] and bodies[done]["message"]["last_status_code"] == 200
    assert bodies[gave_up]["type"] == "message.failed" and bodies[gave_up]["message"]["status"] == "failed"
    assert len(fine.requests) == 1


def test_a_disabled_endpoint_sends_endpoint_disabled(api, platform, notify_worker, endpoint_name):
    with RecordingServer(fail_first=10**6) as doomed, RecordingServer() as notes:
        endpoint(api, f"{endpoint_name}-doomed", doomed.url)
        secret = endpoint(api, f"{endpoint_name}-ops", notes.url)
        assert api.post("/api/notifications/", {"endpoint": f"{endpoint_name}-ops", "events": ["endpoint.disabled"]},
                        format="json").status_code == 201
        for n in range(8):  # failing calls spread past DELAY_WEBHOOK_DISABLE_AFTER (4 s)
            schedule(api, f"{endpoint_name}-doomed", 0.2 + n)
        wait_until(lambda: len(notes.requests) >= 1, 60, 0.2, "endpoint.disabled")
        settle(notes)
        (body,) = [verified(r, secret) for r in notes.requests]
    assert body["type"] == "endpoint.disabled" and body["endpoint"]["name"] == f"{endpoint_name}-doomed"
    assert body["endpoint"]["is_active"] is False and "failed since" in body["endpoint"]["disabled_reason"]
    assert not Endpoint.objects.get(name=f"{endpoint_name}-doomed").is_active

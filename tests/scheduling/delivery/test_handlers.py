"""delivery/handlers.py against the real database, a real HTTP receiver on 127.0.0.1 (allowed by
the test settings) and the module's own vhost: what a webhook call carries and how it is signed,
what the delivery loop reads per endpoint, and what a Celery handler task is sent as."""

import base64
import hashlib
import hmac
import json
from datetime import timedelta

import pytest
import requests
from django.utils import timezone

from harness.recording_server import RecordingServer
from scheduling.delivery.handlers import (
    celery_task_outgoing,
    post_webhook,
    webhook_deadline_s,
    webhook_headers,
    webhook_profiles,
)
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.security import secret_box, webhook_signing

pytestmark = pytest.mark.django_db
CURRENT, PREVIOUS = webhook_signing.generate_secret(), webhook_signing.generate_secret()


def _signed_by(secret: str, headers: dict, body: bytes) -> bool:
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    digest = hmac.new(webhook_signing.signing_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode() in headers["webhook-signature"].split()


def message_to(endpoint: Endpoint, payload=None) -> ScheduledMessage:
    return ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, payload=payload or {"n": 1},
                                           due_at=timezone.now(), requested_delay_ms=0)


@pytest.fixture
def webhook(endpoint_of):
    def make(url="https://hooks.example/in", **fields):
        return endpoint_of(handler="webhook", handler_target=url, webhook_secret=secret_box.seal(CURRENT), **fields)

    return make


def test_a_call_is_signed_by_the_current_secret_and_the_previous_one_until_it_expires(webhook):
    endpoint = webhook(webhook_secret_previous=secret_box.seal(PREVIOUS),
                       webhook_secret_previous_expires_at=timezone.now() + timedelta(hours=1))
    message = message_to(endpoint, {"text": "é"})
    body = json.dumps({"text": "é"}, ensure_ascii=False, separators=(",", ":")).encode()
    headers = webhook_headers(message, body, timestamp=1_700_000_000)
    assert (headers["webhook-id"], headers["X-Delay-Message-Id"]) == (str(message.id), str(message.id))
    assert (headers["webhook-timestamp"], headers["X-Delay-Attempt"]) == ("1700000000", "1")
    assert _signed_by(CURRENT, headers, body) and _signed_by(PREVIOUS, headers, body)
    assert not _signed_by(CURRENT, headers, body + b" ")

    Endpoint.objects.filter(pk=endpoint.pk).update(webhook_secret_previous_expires_at=timezone.now())
    message.endpoint.refresh_from_db()
    headers = webhook_headers(message, body, timestamp=1_700_000_000)
    assert _signed_by(CURRENT, headers, body) and not _signed_by(PREVIOUS, headers, body)


def test_the_deadline_is_the_endpoints_capped_by_the_platforms(webhook):
    endpoint = webhook()
    assert webhook_deadline_s(endpoint) == 5  # DELAY_WEBHOOK_TIMEOUT_SECONDS' default
    endpoint.webhook_timeout_seconds = 2.5
    assert webhook_deadline_s(endpoint) == 2.5
    endpoint.webhook_timeout_seconds = 600
    assert webhook_deadline_s(endpoint) == 60  # DELAY_WEBHOOK_TIMEOUT_MAX_SECONDS' default


def test_the_profiles_are_of_active_webhook_endpoints_with_their_limits(webhook, endpoint_of, endpoint_name):
    limited = webhook(max_concurrent=3)
    Endpoint.objects.create(name=f"{endpoint_name}-off", queue=f"{endpoint_name}-off", topology=limited.topology,
                            handler="webhook", handler_target="https://hooks.example/off", is_active=False,
                            webhook_secret=secret_box.seal(CURRENT))
    Endpoint.objects.create(name=f"{endpoint_name}-none", queue=f"{endpoint_name}-none", topology=limited.topology)
    profiles = webhook_profiles()
    assert set(profiles) == {limited.queue}
    profile = profiles[limited.queue]
    assert (profile.endpoint_id, profile.url, profile.limit, profile.deadline_s) == (
        limited.pk, "https://hooks.example/in", 3, 5)
    assert (profile.handover, profile.lease_s) == (3, 5)  # max_concurrent: only the running, one deadline
    assert profile.keys == (webhook_signing.signing_key(CURRENT),)


def test_a_webhook_is_posted_and_a_failing_answer_raises(webhook):
    with RecordingServer(fail_first=1) as server:
        message = message_to(webhook(url=server.url), {"n": 7})
        with pytest.raises(RuntimeError, match="answered 500"):
            post_webhook(message)
        post_webhook(message)
    assert [json.loads(r["body"]) for r in server.requests] == [{"n": 7}, {"n": 7}]
    assert server.requests[1]["headers"]["X-Delay-Message-Id"] == str(message.id)


def test_a_webhook_slower_than_its_deadline_is_cut(webhook):
    with RecordingServer(hold_seconds=2) as server:
        message = message_to(webhook(url=server.url, webhook_timeout_seconds=0.3))
        with pytest.raises(requests.Timeout):
            post_webhook(message)


def test_a_celery_handler_task_carries_the_payload_and_the_message_id(endpoint_of, platform):
    endpoint = endpoint_of(handler="celery_task", handler_target="testapp.record_receipt")
    message = message_to(endpoint, {"n": 3})
    outgoing = celery_task_outgoing(message)
    assert json.loads(outgoing.body)[0] == [{"n": 3}]  # args: the payload, one argument
    assert (outgoing.headers["id"], outgoing.headers["task"]) == (str(message.id), "testapp.record_receipt")
    assert outgoing.headers["dp_message_id"] == str(message.id)
    assert "dp_ordered" not in outgoing.headers

"""delivery_receive: the consumer's decision for each hand-over, against the real database
(and a real local HTTP server for webhook handlers)."""

import hashlib
import hmac
import json
import socket
import ssl
import subprocess
import threading
import time
from datetime import timedelta

import pytest
from django.db.models import JSONField, Value
from django.utils import timezone
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from harness.recording_server import RecordingServer
from scheduling.delivery.services import (
    Result,
    delivery_receive,
    delivery_receive_many,
    delivery_retry_unsent,
)
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.security import webhook_signing

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


@pytest.fixture
def make(versions, endpoint_name):
    def make(handler="none", target="", due_in=timedelta(0), status=Status.PUBLISHED, secret="s" * 32):
        endpoint, _ = Endpoint.objects.get_or_create(
            name=endpoint_name, defaults=dict(queue=endpoint_name, topology=versions["v2"], handler=handler,
                                              handler_target=target,
                                              webhook_secret=secret),
        )
        now = timezone.now()
        return ScheduledMessage.objects.create(
            endpoint=endpoint, topology=versions["v2"], payload={"order": 7}, due_at=now + due_in,
            requested_delay_ms=0, status=status,
            created_at=now - timedelta(hours=1),  # accepted before due: lateness counts from due_at
        )

    return make


def test_first_hand_over_delivers_and_records_lateness(make):
    message = make(due_in=timedelta(milliseconds=-30))
    assert delivery_receive(message_id=str(message.id)).result is Result.DELIVERED
    message.refresh_from_db()
    assert message.status == Status.DELIVERED and message.delivery_count == 1
    assert message.delivered_at >= message.due_at
    assert 30 <= message.lateness_ms < 5000  # correctness: from due_at; a bound a busy machine keeps
    assert message.lateness_ms == (message.delivered_at - message.due_at) // timedelta(milliseconds=1)


def test_a_message_asked_for_in_the_past_is_late_only_since_it_was_accepted(make):
    """The batch path loads created_at with the locked rows (lifecycle.lateness_ms)."""
    message = make(due_in=-timedelta(days=1))
    ScheduledMessage.objects.filter(id=message.id).update(created_at=timezone.now() - timedelta(milliseconds=30))
    assert delivery_receive_many(items=[(str(message.id), 0)])[0].result is Result.DELIVERED
    message.refresh_from_db()
    assert 30 <= message.lateness_ms < 5000  # correctness: from due_at; a bound a busy machine keeps
    assert message.due_at < message.created_at  # the requested time is kept


def test_the_receiving_worker_is_recorded_and_a_duplicate_elsewhere_keeps_it(make):
    message = make()
    delivery_receive(message_id=str(message.id), by="w1@host")
    assert delivery_receive(message_id=str(message.id), by="w2@host").result is Result.DUPLICATE
    message.refresh_from_db()
    assert message.delivered_by == "w1@host" and message.delivery_count == 2


@pytest.mark.parametrize("payload", [{"order": 7, "name": "Zoë ✓"}, [1, 2.5, None], "text", 0, None, {}])
def test_a_webhook_posts_the_payload_as_stored_whatever_its_json(make, payload):
    """The handler's payload and endpoint come from one query (ScheduledMessageQuerySet.handler_data)."""
    with RecordingServer() as server:
        message = make(handler="webhook", target=server.url)
        stored = Value(None, JSONField()) if payload is None else payload  # JSON null, not SQL NULL
        ScheduledMessage.objects.filter(id=message.id).update(payload=stored)
        assert delivery_receive(message_id=str(message.id)).result is Result.DELIVERED
    (request,) = server.requests
    assert json.loads(request["body"]) == payload and request["path"] == "/hook"


def test_duplicate_is_counted_and_suppressed(make):
    message = make()
    delivery_receive(message_id=str(message.id))
    delivered_at = ScheduledMessage.objects.get(id=message.id).delivered_at
    assert delivery_receive(message_id=str(message.id)).result is Result.DUPLICATE
    assert delivery_receive(message_id=str(message.id)).result is Result.DUPLICATE
    message.refresh_from_db()
    assert message.delivery_count == 3 and message.delivered_at == delivered_at


def test_cancelled_message_is_dropped_and_counted(make):
    message = make(status=Status.CANCELLED)
    with RecordingServer() as server:
        Endpoint.objects.filter(id=message.endpoint_id).update(handler="webhook", handler_target=server.url)
        assert delivery_receive(message_id=str(message.id)).result is Result.CANCELLED
    assert server.requests == []
    message.refresh_from_db()
    assert message.status == Status.CANCELLED and message.delivery_count == 1 and message.delivered_at is None


def test_never_early(make):
    message = make(due_in=timedelta(seconds=30))
    outcome = delivery_receive(message_id=str(message.id))
    assert outcome.result is Result.EARLY and outcome.eta == message.due_at
    message.refresh_from_db()
    assert message.status == Status.PUBLISHED and message.delivery_count == 0


def test_pending_row_still_delivers(make):
    """The relay confirmed the publish but died before committing 'published'."""
    message = make(status=Status.PENDING)
    assert delivery_receive(message_id=str(message.id)).result is Result.DELIVERED


def test_unknown_message():
    assert delivery_receive(message_id="00000000-0000-0000-0000-000000000000").result is Result.UNKNOWN


def test_webhook_is_signed_over_the_exact_body(make):
    """Standard Webhooks: the published library verifies it with the endpoint's secret; the
    secret of a row from before the format (plain text) signs with the same key as always."""
    secret = webhook_signing.generate_secret()
    with RecordingServer() as server:
        message = make(handler="webhook", target=server.url, secret=secret)
        assert delivery_receive(message_id=str(message.id)).result is Result.DELIVERED
    (request,) = server.requests
    headers = request["headers"]
    assert Webhook(secret).verify(request["body"], headers) == {"order": 7}
    assert headers["webhook-id"] == headers["X-Delay-Message-Id"] == str(message.id)
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 5 and headers["X-Delay-Attempt"] == "1"
    key = webhook_signing.signing_key(secret)
    assert headers["X-Delay-Signature"] == "sha256=" + hmac.new(key, request["body"], hashlib.sha256).hexdigest()
    with pytest.raises(WebhookVerificationError):  # another key does not verify it
        Webhook(webhook_signing.generate_secret()).verify(request["body"], headers)


def test_a_secret_from_before_the_format_keeps_its_key(make):
    with RecordingServer() as server:
        message = make(handler="webhook", target=server.url, secret="s" * 32)
        assert delivery_receive(message_id=str(message.id)).result is Result.DELIVERED
    (request,) = server.requests
    assert Webhook(webhook_signing.from_legacy("s" * 32)).verify(request["body"], request["headers"])
    expected = "sha256=" + hmac.new(b"s" * 32, request["body"], hashlib.sha256).hexdigest()
    assert request["headers"]["X-Delay-Signature"] == expected


def test_a_retry_keeps_the_webhook_id_and_signs_its_own_timestamp(make, monkeypatch):
    secret = webhook_signing.generate_secret()
    with RecordingServer(fail_first=1) as server:
        message = make(handler="webhook", target=server.url, secret=secret)
        assert delivery_receive(message_id=str(message.id)).result is Result.RETRY
        monkeypatch.setattr(time, "time", lambda real=time.time: real() + 3)  # the retry is seconds later
        assert delivery_receive(message_id=str(message.id), attempt=1).result is Result.DELIVERED
    first, second = (r["headers"] for r in server.requests)
    assert first["webhook-id"] == second["webhook-id"] == str(message.id)
    assert int(second["webhook-timestamp"]) >= int(first["webhook-timestamp"]) + 2
    assert (first["X-Delay-Attempt"], second["X-Delay-Attempt"]) == ("1", "2")
    for request in server.requests:
        Webhook(secret).verify(request["body"], request["headers"])


@pytest.mark.parametrize(("expires_in", "old_verifies"), [(timedelta(hours=1), True), (timedelta(seconds=-1), False)])
def test_during_a_rotation_both_secrets_sign_and_after_it_only_the_new(make, expires_in, old_verifies):
    old, new = webhook_signing.generate_secret(), webhook_signing.generate_secret()
    with RecordingServer() as server:
        message = make(handler="webhook", target=server.url, secret=new)
        Endpoint.objects.filter(id=message.endpoint_id).update(
            webhook_secret_previous=old, webhook_secret_previous_expires_at=timezone.now() + expires_in)
        assert delivery_receive(message_id=str(message.id)).result is Result.DELIVERED
    (request,) = server.requests
    assert Webhook(new).verify(request["body"], request["headers"])
    assert len(request["headers"]["webhook-signature"].split(" ")) == (2 if old_verifies else 1)
    if old_verifies:
        assert Webhook(old).verify(request["body"], request["headers"])
    else:
        with pytest.raises(WebhookVerificationError, match="No matching signature"):
            Webhook(old).verify(request["body"], request["headers"])


def test_a_target_refused_at_send_is_a_handler_failure_and_nothing_connects(make, settings):
    """Saved while 127.0.0.1 was allowed; the allowance is gone when the message is due."""
    with RecordingServer() as server:
        message = make(handler="webhook", target=server.url)
        settings.DELAY_WEBHOOK_ALLOWED_NETWORKS = []
        outcome = delivery_receive(message_id=str(message.id))
    assert (outcome.result, outcome.attempt) == (Result.RETRY, 1)
    message.refresh_from_db()
    assert "TargetRefused: webhook target 127.0.0.1 is a loopback address" in message.last_error
    assert "DELAY_WEBHOOK_ALLOWED_NETWORKS" in message.last_error and server.requests == []


def test_a_name_that_now_resolves_inside_is_refused_at_send(make, settings, monkeypatch):
    with RecordingServer() as server:
        message = make(handler="webhook", target=server.url.replace("127.0.0.1", "localhost"))
        settings.DELAY_WEBHOOK_ALLOWED_NETWORKS = ["10.0.0.0/8"]
        assert delivery_receive(message_id=str(message.id)).result is Result.RETRY
    message.refresh_from_db()
    assert "webhook target localhost resolves to a loopback address" in message.last_error
    assert "127.0.0.1" not in message.last_error  # what the name resolved to is never said
    assert server.requests == []


def test_the_checked_address_is_the_one_connected_to(make, settings, monkeypatch):
    """DNS rebinding: the name resolves to the (allowed) receiver for the check and inside for
    any later lookup. The request reaches the checked address, with the name as its Host."""
    real = socket.getaddrinfo
    lookups = []

    def rebinding(host, *args, **kwargs):
        if host == "rebind.test":
            lookups.append(host)
            host = "127.0.0.1" if len(lookups) == 1 else "10.255.255.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    settings.DELAY_WEBHOOK_TIMEOUT_SECONDS = 2
    with RecordingServer() as server:
        message = make(handler="webhook", target=server.url.replace("127.0.0.1", "rebind.test"))
        assert delivery_receive(message_id=str(message.id)).result is Result.DELIVERED
    assert lookups == ["rebind.test"]
    (request,) = server.requests
    assert request["headers"]["Host"] == f"rebind.test:{server.server.server_port}"


def self_signed(tmp_path, name: str) -> tuple[str, str]:
    """A certificate for ``name`` (and its key), made by openssl."""
    cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
                    "-addext", f"subjectAltName=DNS:{name}", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return str(cert), str(key)


@pytest.mark.parametrize("certified", ["localhost", "elsewhere.test"])
def test_https_to_the_checked_address_still_verifies_the_name(make, tmp_path, monkeypatch, certified):
    """Connected by IP, TLS still sends the URL's name (SNI) and checks the certificate for it."""
    cert, key = self_signed(tmp_path, certified)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", cert)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with RecordingServer() as server:
        server.server.socket = context.wrap_socket(server.server.socket, server_side=True)
        message = make(handler="webhook", target=f"https://localhost:{server.server.server_port}/hook")
        outcome = delivery_receive(message_id=str(message.id))
    message.refresh_from_db()
    if certified == "localhost":
        assert outcome.result is Result.DELIVERED and len(server.requests) == 1, message.last_error
    else:
        assert outcome.result is Result.RETRY and "certificate" in message.last_error and not server.requests


def test_a_redirect_is_not_followed(make, settings):
    """A public receiver could otherwise send the worker on to an address inside."""
    with RecordingServer() as inside, RecordingServer(answer=(302, {"Location": inside.url})) as server:
        message = make(handler="webhook", target=server.url)
        assert delivery_receive(message_id=str(message.id)).result is Result.RETRY
    message.refresh_from_db()
    assert "webhook answered 302" in message.last_error and inside.requests == []


def test_handler_failure_retries_with_backoff_then_fails(make, settings):
    settings.DELAY_HANDLER_MAX_RETRIES = 2
    with RecordingServer(fail_first=10) as server:
        message = make(handler="webhook", target=server.url)
        first = delivery_receive(message_id=str(message.id))
        assert (first.result, first.attempt, first.retry_in) == (Result.RETRY, 1, 2.0)
        # a late duplicate of the original hand-over must not run the handler again
        assert delivery_receive(message_id=str(message.id), attempt=0).result is Result.DUPLICATE
        second = delivery_receive(message_id=str(message.id), attempt=1)
        assert (second.result, second.attempt, second.retry_in) == (Result.RETRY, 2, 4.0)
        assert delivery_receive(message_id=str(message.id), attempt=2).result is Result.FAILED
    assert len(server.requests) == 3
    message.refresh_from_db()
    assert message.status == Status.FAILED and message.attempts == 3
    assert "webhook answered 500" in message.last_error
    assert message.delivery_count == 2 and message.delivered_at is not None


def test_handler_recovers_on_a_retry(make):
    with RecordingServer(fail_first=1) as server:
        message = make(handler="webhook", target=server.url)
        assert delivery_receive(message_id=str(message.id)).result is Result.RETRY
        assert delivery_receive(message_id=str(message.id), attempt=1).result is Result.DELIVERED
    message.refresh_from_db()
    assert message.status == Status.DELIVERED and message.attempts == 1 and len(server.requests) == 2


def test_a_retry_the_broker_never_took_runs_the_handler_again_from_the_copy_handed_back(make):
    """The loop recorded a failed attempt, then could not publish its retry (the broker died):
    the unacked original comes back and must run the handler, not be dropped as a duplicate."""
    with RecordingServer(fail_first=1) as server:
        message = make(handler="webhook", target=server.url)
        assert delivery_receive(message_id=str(message.id)).result is Result.RETRY
        assert delivery_retry_unsent(message_id=str(message.id), attempt=1)
        assert not delivery_retry_unsent(message_id=str(message.id), attempt=1)  # once only
        assert delivery_receive(message_id=str(message.id), attempt=0).result is Result.DELIVERED
    message.refresh_from_db()
    assert message.status == Status.DELIVERED and message.attempts == 0 and len(server.requests) == 2
    assert message.delivery_count == 2  # both hand-overs of the original stay counted


@pytest.mark.parametrize("fail_first", [0, 1])
def test_two_copies_in_one_batch_run_the_handler_once(make, fail_first):
    """An at-least-once hand-over repeated within the loop's batch window: the first copy is
    delivered (its handler runs, and may fail and be retried), the second is a duplicate."""
    with RecordingServer(fail_first=fail_first) as server:
        message = make(handler="webhook", target=server.url)
        outcomes = delivery_receive_many(items=[(str(message.id), 0), (str(message.id), 0)], defer_webhooks=False)
    first = Result.RETRY if fail_first else Result.DELIVERED
    assert [o.result for o in outcomes] == [first, Result.DUPLICATE]
    assert len(server.requests) == 1
    message.refresh_from_db()
    assert message.delivery_count == 2 and message.attempts == fail_first
    assert message.status == (Status.PUBLISHED if fail_first else Status.DELIVERED)


def test_deferred_webhook_copies_are_decided_one_by_one(make):
    """The loop's path for webhooks: the batch defers them untouched, then each copy takes the
    row lock in its own transaction, and the second sees the first one's delivery."""
    with RecordingServer() as server:
        message = make(handler="webhook", target=server.url)
        items = [(str(message.id), 0), (str(message.id), 0)]
        assert [o.result for o in delivery_receive_many(items=items)] == [Result.DEFERRED] * 2
        assert [delivery_receive(message_id=i, attempt=a).result for i, a in items] == [Result.DELIVERED,
                                                                                         Result.DUPLICATE]
    assert len(server.requests) == 1


def test_a_batch_keeps_the_order_and_outcome_of_each_item(make, endpoint_name):
    due = make()
    later = ScheduledMessage.objects.create(endpoint=due.endpoint, topology=due.topology, payload={},
                                            due_at=timezone.now() + timedelta(hours=1), requested_delay_ms=0,
                                            status=Status.PUBLISHED)
    cancelled = ScheduledMessage.objects.create(endpoint=due.endpoint, topology=due.topology, payload={},
                                                due_at=timezone.now(), requested_delay_ms=0, status=Status.CANCELLED)
    unknown = "00000000-0000-0000-0000-000000000000"
    items = [(str(later.id), 0), (unknown, 0), (str(due.id), 0), (str(cancelled.id), 0), (str(due.id), 0)]
    assert [o.result for o in delivery_receive_many(items=items)] == [
        Result.EARLY, Result.UNKNOWN, Result.DELIVERED, Result.CANCELLED, Result.DUPLICATE]


@pytest.mark.parametrize("size", [1, 200])
def test_a_batch_costs_one_statement_whatever_its_size(make, django_assert_num_queries, size):
    """Record-only deliveries due and in flight: one statement (the compare-and-set UPDATE with
    the per-minute figures' upsert in it), no lock query, inside the transaction (a savepoint
    here, as the test runs in one)."""
    messages = [make() for _ in range(size)]
    with django_assert_num_queries(3) as captured:
        outcomes = delivery_receive_many(items=[(str(m.id), 0) for m in messages])
    assert [o.result for o in outcomes] == [Result.DELIVERED] * size
    assert ScheduledMessage.objects.filter(status=Status.DELIVERED).count() == size
    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["SAVEPOINT", "WITH", "RELEASE"]


def test_copies_not_taken_cost_the_one_by_one_path_in_the_same_transaction(make, django_assert_num_queries):
    """A duplicate in the batch: the statement, then the one-by-one path (its lock, its write)."""
    messages = [make() for _ in range(3)]
    with django_assert_num_queries(5) as captured:
        outcomes = delivery_receive_many(items=[(str(m.id), 0) for m in messages] + [(str(messages[0].id), 0)])
    assert [o.result for o in outcomes] == [Result.DELIVERED] * 3 + [Result.DUPLICATE]
    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["SAVEPOINT", "WITH", "SELECT", "UPDATE",
                                                                       "RELEASE"]


def test_a_foreign_id_is_unknown_without_a_database_error(make):
    message = make()
    outcomes = delivery_receive_many(items=[("not-a-uuid", 0), (str(message.id), 0)])
    assert [o.result for o in outcomes] == [Result.UNKNOWN, Result.DELIVERED]


def test_handler_tasks_of_a_batch_are_sent_together_as_celery_messages(make, endpoint_name):
    """A batch's celery_task handlers go out in one windowed publish: each arrives in the task's
    queue as the protocol-2 message send_task would have sent (task name, id = message id, the
    payload as the one argument, the platform's headers)."""
    from scheduling.config.conf import broker

    first = make(handler="celery_task", target="testapp.record_receipt")
    second = ScheduledMessage.objects.create(endpoint=first.endpoint, topology=first.topology, payload={"order": 8},
                                             due_at=first.due_at, requested_delay_ms=0, status=Status.PUBLISHED)
    outcomes = delivery_receive_many(items=[(str(first.id), 0), (str(second.id), 0)])
    first.refresh_from_db()
    assert [o.result for o in outcomes] == [Result.DELIVERED, Result.DELIVERED], first.last_error
    with broker().session() as session, session.reader("celery") as reader:
        got = {m.headers["id"]: m for m in reader.get(10) if m.headers.get("dp_message_id") in (str(first.id), str(second.id))}
        for m in got.values():
            reader.ack(m)
    assert set(got) == {str(first.id), str(second.id)}
    task = got[str(second.id)]
    assert task.headers["task"] == "testapp.record_receipt" and task.headers["dp_due_at"] == second.due_at.isoformat()
    assert json.loads(task.body)[0] == [{"order": 8}] and task.properties["content_type"] == "application/json"


def test_a_handler_task_the_allowlist_no_longer_allows_is_not_sent(make, endpoint_name, settings):
    """Checked again in the worker: in one batch, the task the allowlist now refuses is a failed
    attempt (retried as any other), the allowed one still goes out."""
    from scheduling.config.conf import broker

    refused = make(handler="celery_task", target="testapp.record_receipt")
    other = Endpoint.objects.create(name=f"{endpoint_name}-2", queue=f"{endpoint_name}-2", topology=refused.topology, handler="celery_task",
                                    handler_target="testapp.plain_receipt")
    allowed = ScheduledMessage.objects.create(endpoint=other, topology=refused.topology, payload={"order": 9},
                                              due_at=refused.due_at, requested_delay_ms=0, status=Status.PUBLISHED)
    settings.DELAY_CELERY_TASK_ALLOWLIST = ["testapp.plain_*"]
    outcomes = delivery_receive_many(items=[(str(refused.id), 0), (str(allowed.id), 0)])
    assert [o.result for o in outcomes] == [Result.RETRY, Result.DELIVERED]
    refused.refresh_from_db()
    assert ("task not sent: task 'testapp.record_receipt' is not allowed: it matches none of "
            "DELAY_CELERY_TASK_ALLOWLIST (testapp.plain_*)") in refused.last_error
    with broker().session() as session, session.reader("celery") as reader:
        sent = [m for m in reader.get(10) if m.headers.get("dp_message_id") in (str(refused.id), str(allowed.id))]
        for m in sent:
            reader.ack(m)
    assert [m.headers["id"] for m in sent] == [str(allowed.id)]


def test_a_handler_task_the_broker_does_not_take_postpones_the_delivery_and_records_nothing(make, settings):
    """A broker that cannot take the task now (a node lost, a leader being elected) is not the
    handler's failure: the row stays as it was (no attempt, no delivery, no backoff of 2, 4, 8 s)
    and the loop tries again soon; once the broker takes it, it is one ordinary delivery."""
    message = make(handler="celery_task", target="testapp.record_receipt")
    broker_url = settings.BROKER_URL
    settings.BROKER_URL = "amqp://guest:guest@127.0.0.1:1//"  # nothing listens there
    (outcome,) = delivery_receive_many(items=[(str(message.id), 0)])
    assert outcome.result is Result.POSTPONED
    message.refresh_from_db()
    assert (message.status, message.delivered_at, message.attempts, message.delivery_count) == \
        (Status.PUBLISHED, None, 0, 0)
    settings.BROKER_URL = broker_url
    (outcome,) = delivery_receive_many(items=[(str(message.id), 0)])
    message.refresh_from_db()
    assert outcome.result is Result.DELIVERED and (message.status, message.delivery_count) == (Status.DELIVERED, 1)


def test_a_rescheduled_messages_copy_for_its_old_time_is_dropped_and_the_new_one_delivers(make):
    """The loop passes the due time each copy carries: the old copy must not wait in the worker
    for the new time (it would be held for as long as the message was moved)."""
    message = make(due_in=timedelta(milliseconds=-5))
    old_ms = message.due_at_ms
    ScheduledMessage.objects.filter(pk=message.pk).update(due_at=message.due_at + timedelta(milliseconds=2))
    message.refresh_from_db()
    old, new = delivery_receive_many(items=[(str(message.id), 0, old_ms), (str(message.id), 0, message.due_at_ms)])
    assert (old.result, new.result) == (Result.SUPERSEDED, Result.DELIVERED)
    message.refresh_from_db()
    assert message.status == Status.DELIVERED and message.delivery_count == 1  # the old copy is not a hand-over
    later = make(due_in=timedelta(hours=2))
    (held,) = delivery_receive_many(items=[(str(later.id), 0, later.due_at_ms - 3_600_000)])
    assert held.result is Result.SUPERSEDED  # dropped at once, not held as early for an hour


# --- the fallback path (the deliver task, requests) has the engine's deadline and read cap -------


def test_the_fallback_path_cuts_a_dripping_answer_at_the_endpoint_s_deadline(make):
    """A receiver that answers one byte every 0.2 s of a megabyte: requests' per-read timeout
    never fires; the call's deadline (the endpoint's 1 s) ends it, as in the engine. The tarpit
    stops after 60 s whatever happens, so a path without a deadline fails here instead of hanging."""
    from harness.tarpit_server import TarpitServer

    with TarpitServer(every=0.2) as server:
        message = make(handler="webhook", target=server.url)
        Endpoint.objects.filter(pk=message.endpoint_id).update(webhook_timeout_seconds=1)
        stop = threading.Timer(60, server.__exit__, args=(None, None, None))
        stop.start()
        started = time.monotonic()
        try:
            outcome = delivery_receive(message_id=str(message.id))
        finally:
            stop.cancel()
        took = time.monotonic() - started
    assert outcome.result is Result.RETRY and server.requests == 1
    message.refresh_from_db()
    assert "deadline passed (1 s)" in message.last_error and took < 60


def test_the_fallback_path_reads_an_answer_only_up_to_the_cap(make, settings):
    settings.DELAY_WEBHOOK_RESPONSE_MAX_BYTES = 1000
    with RecordingServer(body=b"x" * 5_000_000) as server:
        message = make(handler="webhook", target=server.url)
        outcome = delivery_receive(message_id=str(message.id))
    assert outcome.result is Result.RETRY and len(server.requests) == 1
    message.refresh_from_db()
    assert "webhook answer over 1000 bytes" in message.last_error


# --- W3C traceparent handed on (docs/observability/tracing.md) ----------------------------------

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_handler_task_is_handed_its_messages_traceparent_and_one_without_none(make):
    from scheduling.config.conf import broker

    traced = make(handler="celery_task", target="testapp.record_receipt")
    untraced = ScheduledMessage.objects.create(endpoint=traced.endpoint, topology=traced.topology, payload={},
                                               due_at=traced.due_at, requested_delay_ms=0, status=Status.PUBLISHED)
    outcomes = delivery_receive_many(items=[(str(traced.id), 0), (str(untraced.id), 0)],
                                     traceparents={str(traced.id): TRACEPARENT})
    assert [o.result for o in outcomes] == [Result.DELIVERED, Result.DELIVERED]
    with broker().session() as session, session.reader("celery") as reader:
        got = {m.headers["dp_message_id"]: m for m in reader.get(10)
               if m.headers.get("dp_message_id") in (str(traced.id), str(untraced.id))}
        for m in got.values():
            reader.ack(m)
    assert got[str(traced.id)].headers["traceparent"] == TRACEPARENT  # the task's self.request.traceparent
    assert "traceparent" not in got[str(untraced.id)].headers


def test_the_fallback_path_hands_the_webhook_the_traceparent(make):
    with RecordingServer() as server:
        message = make(handler="webhook", target=server.url)
        assert delivery_receive(message_id=str(message.id), traceparent=TRACEPARENT).result is Result.DELIVERED
        other = make(handler="webhook", target=server.url)
        assert delivery_receive(message_id=str(other.id)).result is Result.DELIVERED
    sent = {r["headers"]["webhook-id"]: r["headers"] for r in server.requests}
    assert sent[str(message.id)]["traceparent"] == TRACEPARENT and "traceparent" not in sent[str(other.id)]


def test_the_line_of_a_message_that_failed_for_good_carries_its_trace_ids(make, settings):
    """Tracing off: the ids are the traceparent the message was handed on with (delayplatform/logs.py)."""
    import io
    import logging

    from delayplatform import logs

    settings.DELAY_HANDLER_MAX_RETRIES = 0
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.TraceIds())
    handler.setFormatter(logs.json_formatter())
    logger = logging.getLogger("scheduling.delivery.services")
    logger.addHandler(handler)
    try:
        with RecordingServer(fail_first=10) as server:
            message = make(handler="webhook", target=server.url)
            outcome = delivery_receive(message_id=str(message.id), traceparent=TRACEPARENT)
    finally:
        logger.removeHandler(handler)
    assert outcome.result is Result.FAILED
    (line,) = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert line["message"].startswith(f"message {message.id} failed after 1 attempts")
    assert (line["trace_id"], line["span_id"]) == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    assert "traceparent" not in line and line["level"] == "ERROR"

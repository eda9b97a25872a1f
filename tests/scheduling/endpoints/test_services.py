"""Endpoints: create with the configured default version, the create rules on edit, moving an
active endpoint binds it first; the guards on handler targets; rotating a webhook secret; a handler
moves to or from celery_queue only with nothing in flight, and a schedule racing it is refused."""

import threading
import time
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from scheduling.config.conf import broker
from scheduling.core.errors import Conflict
from scheduling.core.lifecycle import Status
from scheduling.endpoints.services import endpoint_create, endpoint_rotate_secret, endpoint_update
from scheduling.messages.services import message_schedule
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.security import secret_box, webhook_signing
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]


def bound(prefix: str) -> set[str]:
    exchange = cascade.delivery_exchange(prefix)
    return {b["routing_key"] for b in broker().management.bindings_from(broker().vhost, exchange)}


def test_update_validates_like_create(platform, endpoint_name):
    endpoint = endpoint_create(name=endpoint_name)
    with pytest.raises(ValidationError) as error:
        endpoint_update(endpoint=endpoint, handler="webhook", handler_target="not a url")
    assert error.value.message_dict == {"handler_target": ["must be an http(s) URL"]}
    with pytest.raises(ValidationError) as error:
        endpoint_update(endpoint=endpoint, handler="webhook", handler_target="http://169.254.169.254/latest/")
    assert "169.254.169.254 is a link-local address" in error.value.message_dict["handler_target"][0]
    with pytest.raises(ValidationError) as error:
        endpoint_update(endpoint=endpoint, handler="celery_task", handler_target="os.system")
    assert "DELAY_CELERY_TASK_ALLOWLIST" in error.value.message_dict["handler_target"][0]
    assert Endpoint.objects.get(pk=endpoint.pk).handler == "none"
    updated = endpoint_update(endpoint=endpoint, handler="webhook", handler_target="https://example.invalid/h")
    assert updated.handler == "webhook"  # a secret appears with the webhook
    assert webhook_signing.secret_problem(secret_box.open(updated.webhook_secret)) is None
    assert updated.new_webhook_secret == secret_box.open(Endpoint.objects.get(pk=endpoint.pk).webhook_secret)


def test_moving_to_a_version_binds_there_or_refuses(platform, versions, endpoint_name, unique_prefix):
    endpoint = endpoint_create(name=endpoint_name, topology="v2")
    moved = endpoint_update(endpoint=endpoint, topology="v1")
    assert moved.topology.name == "v1" and f"#.{moved.queue}" in bound(cascade.V1.prefix)
    versions["v2"].prefix = unique_prefix  # nothing declared there
    versions["v2"].save()
    with pytest.raises(Conflict, match="provision the cascade first"):
        endpoint_update(endpoint=moved, topology="v2")
    moved.refresh_from_db()
    assert moved.topology.name == "v1"


def test_new_endpoints_use_the_configured_default_version(platform, endpoint_name, settings):
    settings.DELAY_DEFAULT_VERSION = "v1"
    assert endpoint_create(name=endpoint_name).topology.name == "v1"
    settings.DELAY_DEFAULT_VERSION = "v2"
    assert endpoint_create(name=f"{endpoint_name}-2").topology.name == "v2"
    assert endpoint_create(name=f"{endpoint_name}-3", topology="v1").topology.name == "v1"  # asked for wins


@pytest.fixture
def webhook(platform, endpoint_name):
    return endpoint_create(name=endpoint_name, handler="webhook", handler_target="http://127.0.0.1:9/hook")


def test_a_given_secret_must_be_in_the_standard_format(platform, endpoint_name):
    with pytest.raises(ValidationError) as error:
        endpoint_create(name=endpoint_name, handler="webhook", handler_target="http://127.0.0.1:9/hook",
                        webhook_secret="a-secret-of-sixteen-or-more")
    assert "must be whsec_ followed by the base64" in error.value.message_dict["webhook_secret"][0]
    assert not Endpoint.objects.exists()
    secret = webhook_signing.generate_secret()
    endpoint = endpoint_create(name=endpoint_name, handler="webhook", handler_target="http://127.0.0.1:9/hook",
                               webhook_secret=secret)
    assert secret_box.open(endpoint.webhook_secret) == endpoint.new_webhook_secret == secret
    assert secret not in endpoint.webhook_secret  # stored sealed


def test_rotation_keeps_the_previous_secret_for_the_overlap(webhook):
    before, started = webhook.new_webhook_secret, timezone.now()
    rotated = endpoint_rotate_secret(endpoint=webhook, previous_valid_seconds=3600)
    row = Endpoint.objects.get(pk=webhook.pk)
    assert secret_box.open(row.webhook_secret) == rotated.new_webhook_secret != before
    assert webhook_signing.secret_problem(secret_box.open(row.webhook_secret)) is None
    assert secret_box.open(row.webhook_secret_previous) == before
    assert started + timedelta(hours=1) <= row.webhook_secret_previous_expires_at <= timezone.now() + timedelta(hours=1)


def test_a_second_rotation_ends_the_first_overlap_and_zero_ends_it_at_once(webhook):
    first = endpoint_rotate_secret(endpoint=webhook).new_webhook_secret
    given = webhook_signing.generate_secret()
    row = endpoint_rotate_secret(endpoint=webhook, secret=given)
    assert (secret_box.open(row.webhook_secret), secret_box.open(row.webhook_secret_previous)) == (given, first)
    row = endpoint_rotate_secret(endpoint=webhook, previous_valid_seconds=0)
    assert row.webhook_secret_previous == "" and row.webhook_secret_previous_expires_at is None


@pytest.mark.parametrize(("kwargs", "field", "says"), [
    ({"secret": "plain-text-secret-123"}, "secret", "must be whsec_"),
    ({"previous_valid_seconds": -1}, "previous_valid_seconds", "from 0 to 2,592,000"),
    ({"previous_valid_seconds": 31 * 86400}, "previous_valid_seconds", "from 0 to 2,592,000"),
])
def test_rotation_refuses_bad_input_and_changes_nothing(webhook, kwargs, field, says):
    with pytest.raises(ValidationError) as error:
        endpoint_rotate_secret(endpoint=webhook, **kwargs)
    assert says in error.value.message_dict[field][0]
    row = Endpoint.objects.get(pk=webhook.pk)
    assert (row.webhook_secret, row.webhook_secret_previous) == (webhook.webhook_secret, "")


def test_rotation_refuses_the_current_secret_and_endpoints_without_one(webhook, endpoint_name):
    with pytest.raises(ValidationError, match="is the current secret"):
        endpoint_rotate_secret(endpoint=webhook, secret=webhook.new_webhook_secret)  # its plaintext: sealed differs
    plain = endpoint_create(name=f"{endpoint_name}-none")
    with pytest.raises(ValidationError) as error:
        endpoint_rotate_secret(endpoint=plain)
    assert "only webhook endpoints" in error.value.message_dict["handler"][0]


# --- one wire per endpoint: celery_queue's task messages or the platform's deliver message ------


def rows_in(endpoint, *statuses) -> list[ScheduledMessage]:
    now = timezone.now()
    return ScheduledMessage.objects.bulk_create([
        ScheduledMessage(endpoint=endpoint, topology=endpoint.topology, payload={"n": i}, status=status,
                         due_at=now + timedelta(hours=1), requested_delay_ms=3_600_000)
        for i, status in enumerate(statuses)])


@pytest.mark.parametrize(("start", "to"), [("none", "celery_queue"), ("celery_queue", "webhook")])
def test_a_handler_moves_to_or_from_celery_queue_only_with_nothing_in_flight(platform, endpoint_name, start, to):
    endpoint = endpoint_create(name=endpoint_name, handler=start)
    in_flight = rows_in(endpoint, Status.PENDING, Status.PUBLISHED, Status.PUBLISHED)
    rows_in(endpoint, Status.DELIVERED, Status.FAILED, Status.CANCELLED)  # finished: not in flight
    target = {"handler_target": "https://example.invalid/h"} if to == "webhook" else {}
    with pytest.raises(ValidationError) as error:
        endpoint_update(endpoint=endpoint, handler=to, **target)
    (says,) = error.value.message_dict["handler"]
    assert f"cannot change from {start} to {to} while 3 message(s) are in flight" in says
    assert Endpoint.objects.get(pk=endpoint.pk).handler == start
    ScheduledMessage.objects.filter(pk__in=[r.pk for r in in_flight]).update(status=Status.CANCELLED)
    assert endpoint_update(endpoint=endpoint, handler=to, **target).handler == to
    assert Endpoint.objects.get(pk=endpoint.pk).handler == to


def test_a_handler_change_within_one_wire_keeps_its_messages_in_flight(platform, endpoint_name):
    endpoint = endpoint_create(name=endpoint_name)
    rows_in(endpoint, Status.PENDING)
    assert endpoint_update(endpoint=endpoint, handler="webhook", handler_target="https://example.invalid/h").handler \
        == "webhook"  # both travel as the platform's deliver message


def _wait_for_a_lock_wait(timeout: float = 20) -> None:
    """Until another session of this database waits for a lock (the schedule, for the endpoint's row)."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # else a transaction sees its first snapshot
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")
            if cursor.fetchone()[0]:
                return
            time.sleep(0.02)
    raise AssertionError("the schedule never waited for the endpoint's row")


@pytest.mark.django_db(transaction=True)
def test_a_schedule_racing_a_handler_change_is_refused_not_stored(platform, endpoint_name):
    """The schedule validated its message for the handler it read (none: any payload); the change
    to celery_queue commits while it runs: it must not store a row its new wire cannot carry."""
    endpoint = endpoint_create(name=endpoint_name)
    stale = Endpoint.objects.select_related("topology", "team").get(pk=endpoint.pk)
    outcome = {}

    def schedule():
        try:
            outcome["row"] = message_schedule(endpoint=stale, payload={"not": "a task"}, delay=3600)
        except Exception as exc:  # noqa: BLE001 - asserted below
            outcome["error"] = exc
        finally:
            connection.close()

    with transaction.atomic():
        endpoint_update(endpoint=endpoint, handler="celery_queue")  # nothing in flight: its row locked to the commit
        racer = threading.Thread(target=schedule)
        racer.start()
        _wait_for_a_lock_wait()
    racer.join(30)
    assert isinstance(outcome.get("error"), Conflict), outcome
    assert "changed its handler to celery_queue" in str(outcome["error"])
    assert not ScheduledMessage.objects.filter(endpoint=endpoint).exists()

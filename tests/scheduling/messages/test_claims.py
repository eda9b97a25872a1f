"""New rows written as published and sent after their commit (messages/claims.py), against the live
broker: no lock and no second write on the way; what the broker did not take goes back to the
sweeper, except a row cancelled meanwhile; the outbox's way where the rescue does not cover them."""

import uuid
from datetime import timedelta

import pytest
from django.test import TestCase
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.messages import wire
from scheduling.messages.claims import relay_claim_new, relay_send_claimed
from scheduling.messages.relay import relay_publish
from scheduling.messages.services import message_schedule_many
from scheduling.models import Endpoint, ScheduledMessage
from tests.topology.helpers import get

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
Status = ScheduledMessage.Status


@pytest.fixture
def v3_endpoint(bound_endpoint):
    return bound_endpoint("v3")


@pytest.fixture
def committed(monkeypatch):
    """Scheduling as the API does it, with on_commit callbacks run (these tests' transaction
    never commits); the relay's pause after a refused broker reset for each test."""
    from django.db import connection


    def schedule(endpoint, delays):
        with CaptureQueriesContext(connection) as captured, \
                TestCase.captureOnCommitCallbacks(execute=True):
            results = message_schedule_many(items=[{"endpoint": endpoint.name, "payload": {"n": i}, "delay": d}
                                                   for i, d in enumerate(delays)])
        written = [q["sql"] for q in captured.captured_queries if "scheduling_scheduledmessage" in q["sql"]]
        return [r.message for r in results], written

    return schedule


def test_new_rows_are_written_published_and_sent_after_the_commit_with_no_second_write(v3_endpoint, amqp,
                                                                                         committed):
    start = 31.05 - timezone.now().microsecond / 1e6  # three due times inside one second
    messages, written = committed(v3_endpoint, [round(start + d, 3) for d in (0, 0.2, 0.4)])
    assert not [sql for sql in written if "FOR UPDATE" in sql or sql.lstrip().upper().startswith("UPDATE")], written
    rows = list(ScheduledMessage.objects.filter(id__in=[m.id for m in messages]))
    assert {r.status for r in rows} == {Status.PUBLISHED} and len({r.published_at for r in rows}) == 1
    (level,) = {r.first_exchange for r in rows}
    (envelope,) = list(iter(lambda: get(amqp, level), None))  # one envelope, as the rows say
    assert sorted(wire.envelope_ids(envelope.headers, envelope.body)) == sorted(str(r.id) for r in rows)
    assert envelope.headers[wire.H_PUBLISHED_AT_MS] == wire.to_epoch_ms(rows[0].published_at)


def test_rows_the_broker_did_not_take_go_back_to_the_sweeper(v3_endpoint, committed, settings):
    settings.BROKER_URL = "amqp://guest:guest@127.0.0.1:1//"
    messages, _ = committed(v3_endpoint, [30, 31])
    assert {m.status for m in messages} == {Status.PENDING}  # what the API answers
    for row in ScheduledMessage.objects.filter(id__in=[m.id for m in messages]):
        assert row.status == Status.PENDING and row.published_at is None and row.last_error
    assert relay_publish(ids=[str(m.id) for m in messages]).published == 0  # still refused: the sweeper's turn


def test_a_row_cancelled_before_the_failed_publish_stays_cancelled(v3_endpoint, settings, monkeypatch):
    settings.BROKER_URL = "amqp://guest:guest@127.0.0.1:1//"
    due = timezone.now() + timedelta(seconds=30)
    rows = [ScheduledMessage.new(endpoint=v3_endpoint, id=uuid.uuid4(), payload={}, due_at=due, requested_delay_ms=0)
            for _ in range(2)]
    claimed = relay_claim_new(rows=rows)
    ScheduledMessage.objects.insert_many(rows)
    ScheduledMessage.objects.filter(id=rows[0].id).update(status=Status.CANCELLED)
    relay_send_claimed(claimed=claimed)
    assert dict(ScheduledMessage.objects.filter(id__in=[r.id for r in rows]).values_list("id", "status")) == {
        rows[0].id: Status.CANCELLED, rows[1].id: Status.PENDING}


def test_without_the_rescue_behind_it_new_rows_take_the_outbox_way(v3_endpoint, amqp, committed, settings):
    waits_in_the_database = ScheduledMessage.new(endpoint=v3_endpoint, id=uuid.uuid4(), payload={},
                                                 due_at=timezone.now(), requested_delay_ms=0)
    waits_in_the_database.delivery_mode = "timeout_manager"  # the rescue does not serve it
    assert relay_claim_new(rows=[waits_in_the_database]) is None
    settings.DELAY_RESCUE_AFTER_MS = 0
    messages, written = committed(v3_endpoint, [30])
    assert [sql for sql in written if "FOR UPDATE SKIP LOCKED" in sql]  # locked, published, then marked
    assert ScheduledMessage.objects.get(id=messages[0].id).status == Status.PUBLISHED



def test_a_celery_queue_endpoint_s_new_rows_are_written_published_too(v3_endpoint, amqp, monkeypatch):
    """The rescue serves them (messages/rescue.py, message_rescue_overdue_tasks), and their
    workers' claim makes its copy harmless: the same window as any endpoint's."""
    Endpoint.objects.filter(id=v3_endpoint.id).update(handler=Endpoint.Handler.CELERY_QUEUE)
    celery_queue = Endpoint.objects.get(id=v3_endpoint.id)
    row = ScheduledMessage.new(endpoint=celery_queue, id=uuid.uuid4(), payload={"task": "testapp.plain_receipt", "args": [1]},
                               due_at=timezone.now() + timedelta(seconds=30), requested_delay_ms=30000)
    claimed = relay_claim_new(rows=[row])
    assert claimed is not None and claimed.rows == [row] and row.status == Status.PUBLISHED
    ScheduledMessage.objects.insert_many([row])
    assert relay_send_claimed(claimed=claimed).published == 1

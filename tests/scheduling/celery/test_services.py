"""The Celery side of the lifecycle against the real database: a task coming out of the
cascade is claimed once (recorded delivered), a cancelled one or a duplicate is skipped, a copy
redelivered after a worker died runs again; cancel_task cancels every waiting run of a task id."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.celery.services import celery_task_cancel, celery_task_claim, celery_task_schedule
from scheduling.core.lifecycle import Status
from scheduling.delivery.orphans import Carried
from scheduling.models import Endpoint, OrphanCopy, ScheduledMessage

pytestmark = pytest.mark.django_db


@pytest.fixture
def task_row(versions, endpoint_name):
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v2"],
                                       handler=Endpoint.Handler.CELERY_QUEUE)

    def make(status=Status.PUBLISHED, key=None, due_in=timedelta(milliseconds=-20)):
        row_id = uuid.uuid4()
        return ScheduledMessage.objects.create(
            id=row_id, endpoint=endpoint, topology=versions["v2"], payload={"celery": {}}, requested_delay_ms=0,
            due_at=timezone.now() + due_in, status=status, idempotency_key=key or str(row_id),
            created_at=timezone.now() - timedelta(hours=1))  # accepted before due: lateness counts from due_at

    return make


def claim(row, redelivered=False) -> bool:
    return celery_task_claim(message_id=str(row.id), redelivered=redelivered)


def test_the_first_hand_over_runs_and_is_recorded_delivered(task_row):
    row = task_row()
    assert claim(row) is True
    row.refresh_from_db()
    assert row.status == Status.DELIVERED and row.delivery_count == 1 and 20 <= row.lateness_ms < 5000


@pytest.mark.parametrize(("status", "redelivered", "runs"), [
    (Status.DELIVERED, False, False),  # a duplicate hand-over: skipped
    (Status.DELIVERED, True, True),  # the worker died mid-run (acks_late): runs again, as Celery would
    (Status.CANCELLED, False, False),
    (Status.CANCELLED, True, False),
    (Status.FAILED, False, False),
    (Status.PENDING, False, True),  # the broker was faster than the relay's commit
])
def test_later_hand_overs(task_row, status, redelivered, runs):
    row = task_row(status=status)
    assert claim(row, redelivered) is runs
    row.refresh_from_db()
    assert row.delivery_count == 1
    assert row.status == (Status.DELIVERED if status == Status.PENDING else status)


def test_a_task_without_a_row_is_set_aside_not_run():
    """A restore from backup leaves tasks scheduled after it in the cascade with no row: not run
    blind, kept for the operator with what the copy carried (delivery/orphans.py)."""
    message_id = str(uuid.uuid4())
    carried = Carried(message_id, 0, "t--tasks", headers={"task": "billing.charge"}, body='[[1], {"cents": 5}]')
    assert celery_task_claim(message_id=message_id, redelivered=False, carried=carried) is False
    kept = OrphanCopy.objects.get(message_id=message_id)
    assert (kept.queue, kept.task, kept.body) == ("t--tasks", "billing.charge", '[[1], {"cents": 5}]')


def test_cancel_task_cancels_the_waiting_runs_of_a_task_id(task_row):
    task_id = str(uuid.uuid4())
    first = task_row(key=task_id)
    retry = task_row(key=f"{task_id}#retry1")
    done = task_row(key=f"{task_id}#retry2", status=Status.DELIVERED)
    other = task_row()
    assert celery_task_cancel(task_id=task_id) == 2
    assert [ScheduledMessage.objects.get(id=r.id).status for r in (first, retry, done, other)] == [
        Status.CANCELLED, Status.CANCELLED, Status.DELIVERED, Status.PUBLISHED]
    assert celery_task_cancel(task_id=task_id) == 0


def test_a_task_the_platform_captures_is_stored_as_captured(versions, endpoint_name):
    """What DelayedTask stores goes as it was captured (wire.is_captured), by the row's own mark."""
    Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v2"],
                            handler=Endpoint.Handler.CELERY_QUEUE)
    captured = {"task": "testapp.plain_receipt", "queue": endpoint_name, "content_type": "application/json",
                "content_encoding": "utf-8", "body": "[[1],{},{}]", "properties": {},
                "headers": {"task": "testapp.plain_receipt", "id": "7d1f0c2e-1f0b-4c3a-9d55-4f1b2a3c4d5e"}}
    row = celery_task_schedule(queue=endpoint_name, task_id=captured["headers"]["id"], retries=0,
                               due_at=timezone.now() + timedelta(hours=1), captured=captured)
    assert ScheduledMessage.objects.get(pk=row.pk).captured_task is True

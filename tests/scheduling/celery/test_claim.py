"""The worker hook that puts every task class through the lifecycle, pinned against Celery:
CELERY_TASK_ANNOTATIONS wraps each task class's before_start, Celery's tracer calls it (it does
so only for a class that overrides it) right before the body, and Ignore raised there skips the
body. These are Celery internals; this test fails on an upgrade that changes them."""

import uuid

import pytest
from celery.app.trace import task_has_custom, trace_task
from django.utils import timezone

import scheduling.celery.tasks  # noqa: F401  (registers the platform's tasks, as a worker does)
from delayplatform.celery import app
from harness.testapp import tasks as testapp_tasks  # noqa: F401  (registers the test tasks)
from harness.testapp.models import Receipt
from scheduling.core.lifecycle import Status
from scheduling.messages import wire
from scheduling.models import Endpoint, OrphanCopy, ScheduledMessage

TASKS = ("testapp.plain_receipt", "testapp.delayed_receipt", "testapp.record_receipt", "scheduling.deliver")


@pytest.mark.parametrize("name", TASKS)
def test_every_task_class_has_the_hook(name):
    task = app.tasks[name]
    assert task_has_custom(task, "before_start")
    assert type(task).before_start.__name__ == "before_start_claimed"


@pytest.fixture
def row(versions, endpoint_name):
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v2"],
                                       handler=Endpoint.Handler.CELERY_QUEUE)

    def make(status):
        return ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v2"], payload={"celery": {}},
                                               due_at=timezone.now(), requested_delay_ms=0, status=status)

    return make


def run(name: str, message_id: str, *args):
    """The task as a worker's pool process runs it (not eagerly), with the platform's header."""
    task, task_id = app.tasks[name], str(uuid.uuid4())
    trace_task(task, task_id, list(args), {}, request={"id": task_id, wire.H_MESSAGE_ID: message_id,
                                                       "delivery_info": {"redelivered": False}}, app=app)
    return task_id


@pytest.mark.django_db
@pytest.mark.parametrize(("status", "runs"), [(Status.PUBLISHED, True), (Status.CANCELLED, False),
                                              (Status.DELIVERED, False)])
def test_a_plain_task_runs_only_when_the_lifecycle_delivers_it(row, status, runs):
    message = row(status)
    task_id = run("testapp.plain_receipt", str(message.id), "x")
    assert Receipt.objects.filter(message_id=f"{task_id}#0").exists() is runs
    message.refresh_from_db()
    assert message.delivery_count == 1 and message.status == (Status.DELIVERED if runs else status)


@pytest.mark.django_db
@pytest.mark.parametrize("already", [False, True])
def test_a_task_past_its_expiry_is_not_run_and_its_message_ends_expired(row, already):
    """The claim asks the lifecycle: past expires_at, an in-flight task expires and does not run; a
    copy of one already expired does not run either and changes nothing."""
    message = row(Status.EXPIRED if already else Status.PUBLISHED)
    ScheduledMessage.objects.filter(id=message.id).update(expires_at=timezone.now())
    task_id = run("testapp.plain_receipt", str(message.id), "x")
    assert not Receipt.objects.filter(message_id=f"{task_id}#0").exists()
    message.refresh_from_db()
    assert message.status == Status.EXPIRED and message.delivery_count == 0 and message.delivered_at is None


@pytest.mark.django_db
def test_tasks_without_the_header_are_left_alone(row):
    task = app.tasks["testapp.plain_receipt"]
    task_id = str(uuid.uuid4())
    trace_task(task, task_id, ["y"], {}, request={"id": task_id, "delivery_info": {}}, app=app)
    assert Receipt.objects.filter(message_id=f"{task_id}#0").exists()


@pytest.mark.django_db
def test_a_task_whose_row_is_missing_is_set_aside_with_its_arguments_not_run():
    """After a restore from backup: the task's copy came out of the cascade, its row is gone."""
    task, task_id, message_id = app.tasks["testapp.plain_receipt"], str(uuid.uuid4()), str(uuid.uuid4())
    trace_task(task, task_id, ["z"], {}, request={
        "id": task_id, wire.H_MESSAGE_ID: message_id, wire.H_DUE_AT_MS: 1_900_000_000_000,
        "delivery_info": {"redelivered": False, "routing_key": "0.0.1.t--tasks"}}, app=app)
    assert not Receipt.objects.filter(message_id=f"{task_id}#0").exists()
    kept = OrphanCopy.objects.get(message_id=message_id)
    assert (kept.queue, kept.task, kept.body) == ("t--tasks", "testapp.plain_receipt", '[["z"], {}]')
    assert kept.headers["id"] == task_id and wire.to_epoch_ms(kept.due_at) == 1_900_000_000_000


@pytest.mark.django_db
def test_the_deliver_fallback_sets_a_copy_with_no_row_aside():
    message_id = str(uuid.uuid4())
    task, task_id = app.tasks["scheduling.deliver"], str(uuid.uuid4())
    trace_task(task, task_id, [message_id], {}, request={
        "id": task_id, wire.H_MESSAGE_ID: message_id, "delivery_info": {"routing_key": "1.0.t--orders"}}, app=app)
    kept = OrphanCopy.objects.get(message_id=message_id)
    assert (kept.queue, kept.task, kept.attempt) == ("t--orders", "scheduling.deliver", 0)

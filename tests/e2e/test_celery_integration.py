"""Celery tasks delayed through the cascade, run by a Celery worker: once, never early, intact,
cancellable, held by the broker (not the worker) while they wait, and recorded in the message
lifecycle whatever their task class (DelayedTask or a plain @shared_task). Every test runs with
the Celery queue's endpoint on v2 and on v3."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from delayplatform.celery import app
from harness.celery_worker import celery_drained
from harness.testapp.models import Receipt
from harness.testapp.tasks import delayed_receipt, plain_receipt, quick_retry_receipt, retry_once
from harness.waiting import wait_until
from scheduling.celery import cancel_task, schedule_task
from scheduling.config.conf import broker
from scheduling.models import Endpoint, ScheduledMessage
from topology import cascade

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status


@pytest.fixture(autouse=True, params=["v2", "v3"])
def version(request, settings):
    """The version the Celery queue's endpoint is created on (on first use, as the default)."""
    settings.DELAY_DEFAULT_VERSION = request.param
    return cascade.get_version(request.param)


def receipts(task_id):
    return list(Receipt.objects.filter(message_id__startswith=f"{task_id}#").order_by("received_at"))


def queue_info(name):
    return broker().management.queue(broker().vhost, name) or {}


def row_of(task_id):
    return ScheduledMessage.objects.get(idempotency_key=task_id)


def skipped(worker, task_id):
    """The worker's word that it skipped the task at the point where it would have run it."""
    return f"[{task_id}] skipped: cancelled, already run" in worker.log_text()


def test_countdown_3_runs_once_and_not_before(platform, worker, version):
    sent = timezone.now()
    result = delayed_receipt.apply_async(args=["hello"], countdown=3)
    (receipt,) = wait_until(lambda: receipts(result.id), 15, message="the task to run")
    assert receipt.received_at - sent >= timedelta(seconds=3)
    row = row_of(result.id)
    assert row.topology.name == version.name and row.status == Status.DELIVERED and row.endpoint.name == "celery"
    assert row.endpoint.handler == Endpoint.Handler.CELERY_QUEUE and row.delivery_count == 1
    assert 0 <= row.lateness_ms <= 5000 and row.delivered_at >= row.due_at  # a bound a busy machine keeps
    celery_drained()
    assert len(receipts(result.id)) == 1


def test_task_id_args_kwargs_and_headers_arrive_intact_without_eta(platform, worker):
    task_id = str(uuid.uuid4())
    result = delayed_receipt.apply_async(args=[1, "two", {"3": [4]}], kwargs={"when": "later"}, task_id=task_id,
                                         headers={"tenant": "acme"}, countdown=1)
    assert result.id == task_id
    (receipt,) = wait_until(lambda: receipts(task_id), 15, message="the task to run")
    assert receipt.payload == {"args": [1, "two", {"3": [4]}], "kwargs": {"when": "later"}, "task_id": task_id,
                               "retries": 0, "tenant": "acme", "eta": None}
    assert str(row_of(task_id).id) == task_id  # the row is the task: cancel and look up by its id


def test_retry_with_countdown_goes_through_the_cascade_too(platform, worker):
    result = retry_once.apply_async(countdown=1)
    first, second = wait_until(lambda: (r := receipts(result.id)) and len(r) == 2 and r, 20, message="two runs")
    assert (first.payload["retries"], second.payload["retries"]) == (0, 1)
    assert second.received_at - first.received_at >= timedelta(seconds=2)
    retry_row = ScheduledMessage.objects.get(idempotency_key=f"{result.id}#retry1")
    assert retry_row.status == Status.DELIVERED and retry_row.delivery_count == 1


def test_a_retry_on_celerys_own_path_runs(platform, worker):
    """A task that came out of the cascade retried by Celery itself (a plain task's ``self.retry``):
    Celery copies the run's headers into the retry, whose claim named the first run's message, already
    delivered, and skipped it as already run. It runs, once, and the row stays one delivery."""
    result = schedule_task(quick_retry_receipt, args=["again"], countdown=2)
    first, second = wait_until(lambda: (r := receipts(result.id)) and len(r) == 2 and r, 20,
                               message="the first run and its retry")
    assert (first.payload["retries"], second.payload["retries"]) == (0, 1)
    assert not skipped(worker, result.id)
    row = row_of(result.id)
    assert row.status == Status.DELIVERED and row.delivery_count == 1
    celery_drained()
    assert len(receipts(result.id)) == 2


def test_cancelled_task_never_runs(platform, worker):
    result = delayed_receipt.apply_async(countdown=3)
    wait_until(lambda: row_of(result.id).status == Status.PUBLISHED, 5, message="in the cascade")
    assert cancel_task(result.id) == 1
    # it still comes out of the cascade into the celery queue, and the worker skips it
    wait_until(lambda: skipped(worker, result.id), 15, message="the worker to skip the cancelled task")
    assert receipts(result.id) == []
    row = row_of(result.id)
    assert row.status == Status.CANCELLED and row.delivery_count == 1 and row.delivered_at is None
    assert cancel_task(result.id) == 0


def test_a_plain_task_given_to_schedule_task_ends_delivered(platform, worker):
    """Not a DelayedTask: the worker still records its delivery (scheduling.celery.claim's hook on every
    task class), so the accuracy report never counts it as lost."""
    result = schedule_task(plain_receipt, args=["plain"], countdown=2)
    assert row_of(result.id).endpoint.handler == Endpoint.Handler.CELERY_QUEUE
    (receipt,) = wait_until(lambda: receipts(result.id), 15, message="the plain task to run")
    row = row_of(result.id)  # recorded before the task's body ran
    assert row.status == Status.DELIVERED and row.delivery_count == 1
    assert row.delivered_at >= row.due_at and 0 <= row.lateness_ms <= 5000
    assert receipt.received_at >= row.delivered_at and receipt.payload["args"] == ["plain"]
    celery_drained()
    assert len(receipts(result.id)) == 1


def test_a_plain_task_cancelled_after_it_was_published_never_runs(platform, worker):
    result = schedule_task(plain_receipt, args=["never"], countdown=3)
    wait_until(lambda: row_of(result.id).status == Status.PUBLISHED, 5, message="in the cascade")
    assert cancel_task(result.id) == 1
    wait_until(lambda: skipped(worker, result.id), 15, message="the worker to skip the cancelled task")
    assert receipts(result.id) == []
    row = row_of(result.id)
    assert row.status == Status.CANCELLED and row.delivery_count == 1


def test_long_countdown_is_held_by_the_broker_not_the_worker(platform, worker, version):
    result = schedule_task(delayed_receipt, args=["later"], countdown=7200)
    wait_until(lambda: row_of(result.id).status == Status.PUBLISHED, 5, message="in the cascade")
    row = row_of(result.id)
    assert row.first_exchange == f"{version.prefix}delay-level-12"  # 7200 s: highest bit 4096
    level = wait_until(lambda: (q := queue_info(row.first_exchange)) and q.get("messages_ready") and q, 15, 0.5,
                       "the broker's counts")
    assert level["messages_ready"] >= 1 and level.get("consumers", 0) == 0
    assert queue_info("celery").get("messages_unacknowledged", 0) == 0
    # the same countdown with plain Celery: the worker holds the message unacknowledged
    app.control.add_consumer("plain-compare", reply=True, timeout=5)
    plain_receipt.apply_async(args=["held"], countdown=7200, queue="plain-compare")
    wait_until(lambda: queue_info("plain-compare").get("messages_unacknowledged") == 1, 20, 0.5,
               "plain Celery to hold its task in the worker")


def test_45_minute_countdown_leaves_nothing_unacked_for_the_consumer_timeout(platform, worker, version):
    """RabbitMQ's consumer_timeout (30 min by default) only applies to delivered, unacked
    messages. While a platform task waits, it is a ready message in a level queue that nobody
    consumes: there is nothing a timeout could apply to, however long the delay."""
    result = delayed_receipt.apply_async(countdown=45 * 60)
    wait_until(lambda: row_of(result.id).status == Status.PUBLISHED, 5, message="in the cascade")
    level11 = f"{version.prefix}delay-level-11"
    assert row_of(result.id).first_exchange == level11  # 2700 s: highest bit 2048
    wait_until(lambda: queue_info(level11).get("messages_ready", 0) >= 1, 15, 0.5, "the counts")
    levels = [queue_info(cascade.level_name(v.prefix, lvl)) for v in cascade.VERSIONS.values() for lvl in range(28)]
    assert all(q.get("consumers", 0) == 0 and q.get("messages_unacknowledged", 0) == 0 for q in levels)
    assert queue_info("celery").get("messages_unacknowledged", 0) == 0


def test_worker_restart_while_tasks_wait_loses_none(platform, worker):
    results = [delayed_receipt.apply_async(args=[n], countdown=4 + n / 5) for n in range(20)]
    # all in the cascade (a busy machine may take the first 4 s to publish the 20: the first may be
    # delivered already, which this test does not need to prevent)
    wait_until(lambda: ScheduledMessage.objects.filter(idempotency_key__in=[r.id for r in results],
                                                       status__in=[Status.PUBLISHED, Status.DELIVERED]).count() == 20,
               20)
    worker.stop()
    last_due = max(row_of(r.id).due_at for r in results)
    wait_until(lambda: timezone.now() > last_due + timedelta(seconds=1), 20, 0.2,
               "every one to fall due while no worker runs")
    worker.start()
    wait_until(lambda: Receipt.objects.filter(message_id__in=[f"{r.id}#0" for r in results]).count() >= 20, 30,
               message="all 20 after the restart")
    celery_drained()
    assert Receipt.objects.filter(message_id__in=[f"{r.id}#0" for r in results]).count() == 20
    assert all(row_of(r.id).delivery_count == 1 for r in results)

"""Celery tasks that tests schedule. Each run writes a Receipt whose unique key is the task id
(and retry number), so a second run of the same message fails loudly instead of counting twice."""

from celery import shared_task

from scheduling.celery import DelayedTask

from django.db import transaction

from .models import HandlerCall, Receipt


@shared_task(bind=True, name="testapp.record_receipt", acks_late=True, reject_on_worker_lost=True)
def record_receipt(self, payload):
    """The handler of ``celery_task`` endpoints: gets the message payload. acks_late so a killed
    worker runs it again rather than losing it; the unique receipt keeps the effect single."""
    HandlerCall.objects.create(message_id=self.request.id)
    with transaction.atomic():
        if Receipt.objects.filter(message_id=self.request.id).exists():
            return "duplicate"
        Receipt.objects.create(message_id=self.request.id, payload=payload)
    return "recorded"


def _record(task, args, kwargs):
    Receipt.objects.create(
        message_id=f"{task.request.id}#{task.request.retries}",
        payload={"args": list(args), "kwargs": kwargs, "task_id": task.request.id, "retries": task.request.retries,
                 "tenant": task.request.get("tenant"), "eta": task.request.eta},
    )


@shared_task(bind=True, base=DelayedTask, name="testapp.delayed_receipt")
def delayed_receipt(self, *args, **kwargs):
    _record(self, args, kwargs)


@shared_task(bind=True, base=DelayedTask, name="testapp.retry_once", max_retries=3)
def retry_once(self):
    _record(self, (), {})
    if self.request.retries == 0:
        raise self.retry(countdown=2)


@shared_task(bind=True, name="testapp.plain_receipt")
def plain_receipt(self, *args, **kwargs):
    """An ordinary Celery task: its countdown is held in the worker's memory."""
    _record(self, args, kwargs)


@shared_task(bind=True, name="testapp.started_at")
def started_at(self, due_ms: int):
    """Benchmarks' plain Celery comparison: when did this countdown task actually start?"""
    import time

    started_ms = int(time.time() * 1000)
    Receipt.objects.create(message_id=self.request.id, payload={"due_ms": due_ms, "started_ms": started_ms})

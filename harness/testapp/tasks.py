"""Celery tasks that tests schedule. Each run writes a Receipt (one row per run, duplicates
included), so tests count how often a handler really ran."""

import time

from celery import shared_task

from scheduling.celery import DelayedTask

from .models import Receipt


@shared_task(bind=True, name="testapp.record_receipt", acks_late=True, reject_on_worker_lost=True)
def record_receipt(self, payload):
    """The handler of ``celery_task`` endpoints: gets the message payload; its task id is the
    message id. acks_late, so a killed worker runs it again rather than losing it."""
    Receipt.objects.create(message_id=self.request.id, payload=payload)


@shared_task(bind=True, name="testapp.held_receipt")
def held_receipt(self, payload):
    """Holds ``payload["hold"]`` seconds, then records when it started and ended (wall clock): the
    ordering keys' end-to-end test tells from them whether two tasks of a key overlapped."""
    started = time.time()
    time.sleep(payload.get("hold", 0))
    Receipt.objects.create(message_id=self.request.id, payload={**payload, "started": started, "ended": time.time()})


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
    """An ordinary Celery task (no DelayedTask): delayed only when given to schedule_task."""
    _record(self, args, kwargs)


@shared_task(bind=True, name="testapp.started_at")
def started_at(self, due_ms: int):
    """Benchmarks' plain Celery comparison: when did this countdown task actually start?"""
    import time

    started_ms = int(time.time() * 1000)
    Receipt.objects.create(message_id=self.request.id, payload={"due_ms": due_ms, "started_ms": started_ms})


@shared_task(bind=True, base=DelayedTask, name="testapp.retry_until", max_retries=None)
def retry_until(self, times: int, countdown: float):
    """Retried ``times`` times through the cascade, ``countdown`` apart: one receipt per run."""
    _record(self, (times, countdown), {})
    if self.request.retries < times:
        raise self.retry(countdown=countdown)


@shared_task(bind=True, name="testapp.refuse_then_record", acks_late=True)
def refuse_then_record(self, payload):
    """A handler that keeps failing without the platform's retry: its task message is handed back
    to its queue (Reject with requeue) ``payload["refuse"]`` times, then the run succeeds. Every
    run leaves a receipt ``<task id>#<run>``."""
    from celery.exceptions import Reject

    runs = Receipt.objects.filter(message_id__startswith=f"{self.request.id}#").count()
    Receipt.objects.create(message_id=f"{self.request.id}#{runs}", payload=payload)
    if runs < payload["refuse"]:
        raise Reject("refused by the test handler", requeue=True)


@shared_task(bind=True, name="testapp.traced_receipt")
def traced_receipt(self, *args, **kwargs):
    """What a task is handed of its message's trace: the ``traceparent`` of its request's headers,
    and the OpenTelemetry span current while its body runs (``<trace id>-<span id>``, None when
    tracing did not load OpenTelemetry in this worker): tests/e2e/test_tracing.py."""
    import sys

    otel = sys.modules.get("opentelemetry.trace")
    context = otel.get_current_span().get_span_context() if otel is not None else None
    current = f"{context.trace_id:032x}-{context.span_id:016x}" if context is not None and context.is_valid else None
    Receipt.objects.create(message_id=self.request.id, payload={
        "args": list(args), "traceparent": self.request.get("traceparent"), "current": current})


@shared_task(bind=True, name="testapp.quick_retry_receipt", max_retries=3)
def quick_retry_receipt(self, *args, **kwargs):
    """A plain task (no DelayedTask) that retries once on Celery's own path: a retry that must run."""
    _record(self, args, kwargs)
    if self.request.retries == 0:
        raise self.retry(countdown=1)

"""Delay any Celery task through the cascade instead of holding it in worker memory.

    from scheduling.celery import DelayedTask, cancel_task, schedule_task

    @shared_task(base=DelayedTask)            # or Celery(..., task_cls="scheduling.celery:DelayedTask")
    def send_reminder(user_id): ...

    send_reminder.apply_async(args=[42], countdown=3600)     # held by RabbitMQ, not the worker
    schedule_task(any_task, args=[42], eta=tomorrow_9am)     # the same for a task of any class
    cancel_task(task_id)                                      # durable, unlike revoke()

Celery builds the task message exactly as ``apply_async`` would (routing, ids, retries, custom
headers, links); the platform stores it as a ScheduledMessage and publishes it into the cascade
bound for the task's queue, with no ``eta``: when it comes out, any worker of that queue runs it
at once. The delay is rounded up to whole seconds (the worker must not hold it), so a task runs
up to ~1 s after it is due, never before.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from celery import Task
from celery.utils import uuid as celery_uuid
from django.utils import timezone
from kombu import Connection
from kombu.serialization import dumps as kombu_dumps
from kombu.utils.json import dumps as json_dumps
from kombu.utils.json import loads as json_loads

from scheduling.config.conf import conf

_PROPERTIES = ("correlation_id", "reply_to", "priority")


class _CapturingProducer:
    """Stands in for kombu's Producer: Celery hands it the finished message instead of sending."""

    def __init__(self):
        self.connection = Connection(conf().broker_url)  # never connected: used for error mapping
        self.sent = None

    def publish(self, body, **kwargs):
        self.sent = (body, kwargs)


def _captured(producer: _CapturingProducer) -> dict:
    body, kw = producer.sent
    content_type, content_encoding, data = kombu_dumps(body, serializer=kw.get("serializer") or "json")
    if content_encoding == "binary":
        raise ValueError("only tasks serialized as JSON (Celery's default) can be delayed through the platform")
    declared = kw.get("declare") or []
    queue = declared[0].name if declared else (kw.get("routing_key") if not kw.get("exchange") else None)
    if not queue:
        raise ValueError("cannot tell which queue the task goes to: route it to a named queue")
    return {
        "task": kw["headers"]["task"],
        "queue": queue,
        "headers": json_loads(json_dumps(kw["headers"])),
        # An AMQP expiration would expire the message inside a level queue and dead-letter it
        # early; the task's own `expires` header still applies when it runs.
        "properties": {k: kw[k] for k in _PROPERTIES if kw.get(k) is not None},
        "body": data,
        "content_type": content_type,
        "content_encoding": content_encoding,
    }


def _due_at(countdown, eta) -> datetime | None:
    if eta is not None:
        if isinstance(eta, str):
            eta = datetime.fromisoformat(eta)
        return eta if timezone.is_aware(eta) else timezone.make_aware(eta, timezone.utc)
    if countdown is not None:
        return timezone.now() + timedelta(seconds=float(countdown))
    return None


def schedule_task(task, args=None, kwargs=None, *, countdown=None, eta=None, queue=None, task_id=None, **options):
    """Run ``task`` after ``countdown`` seconds or at ``eta`` (aware datetime or ISO string),
    held by RabbitMQ instead of worker memory. Returns the task's AsyncResult. Raises
    ValueError for a task that cannot go this way and ValidationError for bad input."""
    from scheduling.celery.services import celery_task_schedule

    due = _due_at(countdown, eta) or timezone.now()
    task_id = task_id or celery_uuid()
    if queue is not None:
        options["queue"] = queue
    producer = _CapturingProducer()
    Task.apply_async(task, args, kwargs, task_id=task_id, producer=producer, **options)
    captured = _captured(producer)
    celery_task_schedule(queue=captured["queue"], task_id=task_id, retries=captured["headers"].get("retries") or 0,
                         due_at=due, captured=captured)
    return task.AsyncResult(task_id)


def cancel_task(task_id: str) -> int:
    """Cancel a delayed task by id (all its waiting runs); returns how many were cancelled."""
    from scheduling.celery.services import celery_task_cancel

    return celery_task_cancel(task_id=task_id)


class DelayedTask(Task):
    """A Task whose ``apply_async(countdown=...)``/``eta=...`` goes through the cascade (delays
    up to ``DELAY_CELERY_THRESHOLD_SECONDS`` keep Celery's own path). When it comes out of the
    cascade it is recorded and skipped if cancelled, like any task (scheduling.celery.claim)."""

    def apply_async(self, args=None, kwargs=None, task_id=None, producer=None, link=None, link_error=None,
                    shadow=None, **options):
        due = _due_at(options.get("countdown"), options.get("eta"))
        threshold = timedelta(seconds=conf().celery_threshold_seconds)
        if (
            due is not None
            and producer is None
            and not self.app.conf.task_always_eager
            and due - timezone.now() > max(threshold, timedelta(0))
        ):
            options.pop("countdown", None)
            options.pop("eta", None)
            return schedule_task(self, args, kwargs, task_id=task_id, link=link, link_error=link_error,
                                 shadow=shadow, eta=due, **options)
        return super().apply_async(args, kwargs, task_id=task_id, producer=producer, link=link,
                                   link_error=link_error, shadow=shadow, **options)

"""The comparison users face today: Celery's own native delayed delivery (Celery >= 5.5).

Configured as Celery's documentation says ("Using Quorum Queues"): the task queue is a quorum
queue on a topic exchange, publisher confirms on, quorum queues detected by the worker. Celery
then publishes a countdown task into its own cascade (``celery_delayed_27`` … ``celery_delayed_0``,
NServiceBus's topic design, whole seconds rounded down) and the worker holds the remainder.

    celery -A bench.celery_native worker -Q bench-native -c 2     # what bench/suite.py starts

The task records when it started in the platform's database (harness.testapp's Receipt), like
the countdown comparison, so both are judged by the same query.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "delayplatform.settings_test")

import django  # noqa: E402

django.setup()

from celery import Celery  # noqa: E402
from django.conf import settings  # noqa: E402
from kombu import Exchange, Queue  # noqa: E402

QUEUE = "bench-native"

app = Celery("bench_native", set_as_current=False)  # the platform's app stays current in the bench
app.conf.update(
    broker_url=settings.BROKER_URL,
    # a quorum queue on a topic exchange (native delayed delivery refuses direct exchanges)
    task_queues=[Queue(QUEUE, Exchange(QUEUE, type="topic"), routing_key=QUEUE,
                       queue_arguments={"x-queue-type": "quorum"})],
    task_default_queue=QUEUE,
    task_routes={"*": {"queue": QUEUE}},
    broker_transport_options={"confirm_publish": True},
    worker_detect_quorum_queues=True,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.native_started_at")
def native_started_at(due_ms: int) -> None:
    from harness.testapp.models import Receipt

    started_ms = int(time.time() * 1000)
    Receipt.objects.create(message_id=native_started_at.request.id, payload={"due_ms": due_ms, "started_ms": started_ms})

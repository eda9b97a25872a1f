"""Case 5, head of line: how long an immediate message waits behind thousands of far-future ones;
against Celery countdown and Celery native, where the immediate task queues behind the rest."""

from __future__ import annotations

import time

from bench.cases.base import CELERY_QUEUE, now_ms
from harness.waiting import wait_until


def run(b, comparisons: bool) -> dict:
    """An immediate message behind 3,000 far-future ones (API call to recorded delivery)."""
    result = {}
    for version in b.versions:
        endpoint = b.endpoint("hol", version)
        b.schedule(endpoint, [3600.0] * 3000)
        wait_until(lambda: b.count(endpoint, "published") >= 3000, 120, 0.1)
        sent = time.time()
        (message_id,) = b.schedule(endpoint, [0.0], clients=1)
        wait_until(lambda: b.p.sql("SELECT status FROM scheduling_scheduledmessage WHERE id = %s",
                                   message_id)[0][0] == "delivered", 60, 0.005, "the immediate message")
        (delivered,) = b.p.sql("SELECT EXTRACT(EPOCH FROM delivered_at) FROM scheduling_scheduledmessage "
                               "WHERE id = %s", message_id)[0]
        result[version] = (float(delivered) - sent) * 1000
    if comparisons:
        with b.plain_celery():
            result["celery"] = _celery_head_of_line(b, lambda d, due: b.started_at.apply_async(
                kwargs={"due_ms": due}, countdown=d, queue=CELERY_QUEUE))
        with b.native_celery():
            result["native"] = _celery_head_of_line(b, lambda d, due: b.native.native_started_at.apply_async(
                kwargs={"due_ms": due}, countdown=d))
    return result


def _celery_head_of_line(b, send) -> float | None:
    """Milliseconds from sending to start of an immediate task behind 3,000 countdown tasks;
    None when it has not run within 60 s."""
    for _ in range(3000):
        send(3600, 0)
    sent_ms = now_ms()
    task_id = send(None, sent_ms).id
    try:
        wait_until(lambda: b.celery_lateness([task_id]), 60, 0.01, "Celery's immediate task")
    except AssertionError:
        return None
    return b.celery_lateness([task_id])[0]

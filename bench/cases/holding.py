"""Case 4, the holding cost: what holding many messages of hours costs the platform worker (RSS)
and the broker (queue memory per message, per version), against a stock Celery worker holding
countdown tasks in its own memory."""

from __future__ import annotations

import time

from bench.cases.base import CELERY_QUEUE
from harness.waiting import wait_until


def run(b, platform_worker) -> dict:
    """RSS of the platform worker's process tree before and after n delayed messages of hours
    are in the cascade, against a stock Celery worker holding countdown tasks; and the
    broker's memory per message in flight, per version. A stock worker takes ETA tasks in at
    only ~10-16/s once a backlog exists (its global prefetch grows by one per held task, once
    per loop turn: docs/operations/performance.md), so it gets a fixed time and its cost is scaled to n."""
    from scheduling.config.conf import broker
    from topology import cascade

    n = 20000 if b.quick else 100000
    management = broker().management
    result = {"messages": n}
    before = b.tree_rss_mb(platform_worker)
    vhost = broker().vhost

    def level_queues(prefix: str) -> tuple[int, int]:
        """(memory of the version's queue processes, bytes of the bodies they hold): the node's
        own mem_used moved by ±100 MB with garbage collection and said nothing per message."""
        chosen = [q for q in management.queues(vhost) if q["name"].startswith(prefix)]
        return sum(q.get("memory", 0) for q in chosen), sum(q.get("message_bytes", 0) for q in chosen)

    for version in b.versions:
        endpoint, prefix = b.endpoint("hold", version), cascade.get_version(version).prefix
        time.sleep(6)  # the management API refreshes queue figures every 5 s
        memory_before, _ = level_queues(prefix)
        b.schedule(endpoint, [round(b.rng.uniform(7200, 10800), 3) for _ in range(n)])
        wait_until(lambda: b.count(endpoint, "published") >= n, 600, 0.5, "held rows published")
        time.sleep(6)
        memory_after, body_bytes = level_queues(prefix)
        result[f"broker_bytes_per_msg_{version}"] = (memory_after - memory_before) / n
        result[f"body_bytes_per_msg_{version}"] = body_bytes / n
    result["platform_mb"] = b.tree_rss_mb(platform_worker) - before
    with b.plain_celery() as celery_worker:
        time.sleep(2)
        celery_before = b.tree_rss_mb(celery_worker)
        for _ in range(n):
            b.started_at.apply_async(kwargs={"due_ms": 0}, countdown=7200, queue=CELERY_QUEUE)
        sent = time.monotonic()
        budget = 60 if b.quick else 90

        def held() -> int:
            return (management.queue(broker().vhost, CELERY_QUEUE) or {}).get("messages_unacknowledged", 0)

        while held() < n and time.monotonic() - sent < budget:
            time.sleep(5)
        time.sleep(5)  # the management API's counts lag a few seconds
        celery_held, seconds = held(), time.monotonic() - sent
        celery_delta = b.tree_rss_mb(celery_worker) - celery_before
    per_task_kib = celery_delta * 1024 / celery_held if celery_held else None
    return {**result, "celery_held": celery_held, "celery_mb": celery_delta,
            "celery_intake_per_s": celery_held / seconds, "celery_kib_per_task": per_task_kib,
            "celery_mb_scaled_to_n": per_task_kib * n / 1024 if per_task_kib else None}

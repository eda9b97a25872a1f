"""The platform's Celery consumer (setting ``CELERY_WORKER_CONSUMER``): Celery's own, except that
the setup of Celery's native delayed delivery runs once per worker process, not on every reconnect.

Celery adds that bootstep when a task queue is a quorum queue (the platform's are, on a cluster).
On each consumer restart it connects to every broker URL in turn, retrying a dead one 1, 3 and 5 s
apart: after a node loss it held the consumer — every task, beat's sweeper among them — for ~17 s,
which is most of the pause a node loss caused (issue 22; bench.cluster_failover's stack dumps).
What it declares is durable and cluster-wide, so once is enough; the platform's own task queues
use direct exchanges, which native delayed delivery does not serve anyway (Celery says so in a
warning at start).
"""

from celery.worker.consumer import Consumer as CeleryConsumer
from celery.worker.consumer.delayed_delivery import DelayedDelivery


class DelayedDeliveryOnce(DelayedDelivery):
    name = DelayedDelivery.name  # the same step for anything that names it
    done = False  # per worker process

    def start(self, c) -> None:
        if DelayedDeliveryOnce.done:
            return
        super().start(c)
        DelayedDeliveryOnce.done = True


class Consumer(CeleryConsumer):
    class Blueprint(CeleryConsumer.Blueprint):
        default_steps = [f"{__name__}:DelayedDeliveryOnce" if step.endswith(":DelayedDelivery") else step
                         for step in CeleryConsumer.Blueprint.default_steps]

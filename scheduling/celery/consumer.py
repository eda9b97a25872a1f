"""The platform's Celery consumer (setting ``CELERY_WORKER_CONSUMER``): Celery's own, with two
steps made to survive a cluster node's loss.

Native delayed delivery's setup runs once per worker process, not on every reconnect.

Celery adds that bootstep when a task queue is a quorum queue (the platform's are, on a cluster).
On each consumer restart it connects to every broker URL in turn, retrying a dead one 1, 3 and 5 s
apart: after a node loss that holds the consumer — every task, beat's sweeper among them — for
~17 s, most of the pause a node loss would cause.
What it declares is durable and cluster-wide, so once is enough; the platform's own task queues
use direct exchanges, which native delayed delivery does not serve anyway (Celery says so in a
warning at start).

Remote control (the pidbox, which the platform's ``dp_sync_endpoints`` and ``dp_health`` commands
use) tries again when its queue cannot be bound. The queue is transient and lived on the node
that died; a worker reconnecting at once can declare it while the broker is still removing the
dead node's copy, and the bind then fails with NOT_FOUND, which Celery takes for an
unrecoverable error: the whole worker exits.
"""

import logging
import time

from amqp.exceptions import NotFound
from celery.worker.consumer import Consumer as CeleryConsumer
from celery.worker.consumer.control import Control
from celery.worker.consumer.delayed_delivery import DelayedDelivery

log = logging.getLogger(__name__)
PIDBOX_ATTEMPTS = 20  # 0.5 s apart: the broker removes a dead node's transient queues within seconds


class DelayedDeliveryOnce(DelayedDelivery):
    name = DelayedDelivery.name  # the same step for anything that names it
    done = False  # per worker process

    def start(self, c) -> None:
        if DelayedDeliveryOnce.done:
            return
        super().start(c)
        DelayedDeliveryOnce.done = True


class ControlRetried(Control):
    name = Control.name

    def __init__(self, c, **kwargs):
        super().__init__(c, **kwargs)
        self.start = self._retrying(self.start)  # Control sets start per instance (its pidbox's)

    @staticmethod
    def _retrying(start):
        def start_retrying(c):
            for attempt in range(1, PIDBOX_ATTEMPTS + 1):
                try:
                    return start(c)
                except NotFound as exc:  # each try opens a channel of its own
                    if attempt == PIDBOX_ATTEMPTS:
                        raise
                    log.warning("remote control queue not bound yet (%s); trying again", exc)
                    time.sleep(0.5)

        return start_retrying


_OURS = {":DelayedDelivery": "DelayedDeliveryOnce", ":Control": "ControlRetried"}


class Consumer(CeleryConsumer):
    class Blueprint(CeleryConsumer.Blueprint):
        default_steps = [next((f"{__name__}:{ours}" for theirs, ours in _OURS.items() if step.endswith(theirs)), step)
                         for step in CeleryConsumer.Blueprint.default_steps]

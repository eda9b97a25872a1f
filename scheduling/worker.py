"""Worker side of the platform.

- A bootstep that runs the delivery loop (scheduling/delivery_loop.py) inside every platform
  worker, and a remote-control command that makes it follow endpoint changes at once (it also
  re-reads the endpoint table every few seconds, so a missed broadcast only delays the change).
  Another, ``dp_health``, answers how the loop is, for ``manage.py worker_health``.
- A Celery task annotation (setting ``CELERY_TASK_ANNOTATIONS``) that puts every task class —
  plain ``@shared_task``, ``DelayedTask`` or a base of your own — through the message lifecycle
  when it comes out of the cascade: its row is recorded ``delivered``, and a task that was
  cancelled, or is a duplicate of one that already ran, is skipped (Celery's ``Ignore``).
"""

import logging

from celery import bootsteps
from celery.exceptions import Ignore
from celery.worker.control import control_command

from . import metrics_worker  # noqa: F401  (every worker serves its metrics: the signals it connects)
from .conf import conf
from .task_names import DELIVER

log = logging.getLogger(__name__)
_loop = None
H_MESSAGE_ID = "x-dp-message-id"  # wire.H_MESSAGE_ID; wire imports models, too early here


class DeliveryLoopStep(bootsteps.StartStopStep):
    requires = {"celery.worker.consumer.tasks:Tasks"}

    def include_if(self, parent):
        return conf().delivery_loop  # off for a worker that only runs ordinary tasks

    def start(self, consumer):
        from .delivery_loop import DeliveryLoop

        global _loop
        if _loop is None or not _loop.is_alive():
            _loop = DeliveryLoop(worker_name=consumer.hostname)
            _loop.start()

    def shutdown(self, consumer):
        global _loop
        if _loop is not None:
            _loop.stop()
            _loop = None


@control_command()
def dp_sync_endpoints(state):
    """Endpoint added, paused or resumed: consume accordingly now."""
    if _loop is not None:
        _loop.sync_now.set()
    return {"ok": "syncing"}


@control_command()
def dp_health(state):
    """This worker answers (its consumer is up) and how its delivery loop is (manage.py worker_health)."""
    if not conf().delivery_loop:
        return {"loop": "off"}
    return _loop.health() if _loop is not None else {"loop": "not started"}


def claim_around(before_start):
    """Wrap a task class's ``before_start`` (Celery calls it in the worker right before the task
    body, inside the part of the trace where ``Ignore`` skips the task cleanly)."""

    def before_start_claimed(self, task_id, args, kwargs):
        message_id = self.request.get(H_MESSAGE_ID)
        if message_id and not self.request.is_eager and self.name != DELIVER:
            from .services.celery_tasks import celery_task_claim

            redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
            if not celery_task_claim(message_id=message_id, redelivered=redelivered, by=self.request.hostname or ""):
                log.info("task %s[%s] skipped: cancelled or already run", self.name, task_id)
                raise Ignore()
        return before_start(self, task_id, args, kwargs)

    return before_start_claimed


class ClaimBeforeStart:
    """The annotation: ``{"@before_start": claim_around}`` for every task (``annotate_any``).
    Celery applies one "every task" annotation, the first it finds: a ``"*"`` annotation of
    your own must include ``"@before_start": scheduling.worker.claim_around`` to keep this."""

    def annotate(self, task):
        return None

    def annotate_any(self):
        return {"@before_start": claim_around}

"""The Celery task annotation (setting ``CELERY_TASK_ANNOTATIONS``) that puts every task class —
plain ``@shared_task``, ``DelayedTask`` or a base of your own — through the message lifecycle
when it comes out of the cascade: its row is recorded ``delivered``, and a task that was
cancelled, or is a duplicate of one that already ran, is skipped (Celery's ``Ignore``).
"""

import logging

from celery.exceptions import Ignore

from scheduling.core.task_names import DELIVER

log = logging.getLogger(__name__)
H_MESSAGE_ID = "x-dp-message-id"  # wire.H_MESSAGE_ID; wire imports models, too early here


def claim_around(before_start):
    """Wrap a task class's ``before_start`` (Celery calls it in the worker right before the task
    body, inside the part of the trace where ``Ignore`` skips the task cleanly)."""

    def before_start_claimed(self, task_id, args, kwargs):
        message_id = self.request.get(H_MESSAGE_ID)
        if message_id and not self.request.is_eager and self.name != DELIVER:
            from scheduling.celery.services import celery_task_claim
            from scheduling.delivery.orphans import Carried
            from scheduling.messages.wire import queue_of_routing_key

            info = self.request.delivery_info or {}
            redelivered = bool(info.get("redelivered"))
            # what the copy carried, kept for the operator if its row is missing (delivery/orphans.py)
            headers = {k: v for k, v in vars(self.request).items() if k.startswith("x-dp-")} | {
                "task": self.name, "id": task_id}
            carried = Carried(message_id, 0, queue_of_routing_key(info.get("routing_key") or ""), headers=headers,
                              body=[args, kwargs])
            if not celery_task_claim(message_id=message_id, redelivered=redelivered, by=self.request.hostname or "",
                                     carried=carried):
                log.info("task %s[%s] skipped: cancelled, already run, or its row is missing (set aside)",
                         self.name, task_id)
                raise Ignore()
        return before_start(self, task_id, args, kwargs)

    return before_start_claimed


class ClaimBeforeStart:
    """The annotation: ``{"@before_start": claim_around}`` for every task (``annotate_any``).
    Celery applies one "every task" annotation, the first it finds: a ``"*"`` annotation of
    your own must include ``"@before_start": scheduling.celery.claim.claim_around`` to keep this."""

    def annotate(self, task):
        return None

    def annotate_any(self):
        return {"@before_start": claim_around}

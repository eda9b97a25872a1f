"""The Celery task annotation (setting ``CELERY_TASK_ANNOTATIONS``) that puts every task class —
plain ``@shared_task``, ``DelayedTask`` or a base of your own — through the message lifecycle
when it comes out of the cascade: its row is recorded ``delivered``, and a task that was
cancelled, or is a duplicate of one that already ran, is skipped (Celery's ``Ignore``).

With tracing on (docs/observability/tracing.md) the claim also continues the message's trace: a
``delay.deliver`` span, the child of the ``traceparent`` the task message carries (its publish
span), current from the claim to the task's end, so the body's spans and log lines are in the
trace. It ends on Celery's ``task_postrun`` signal, connected only when tracing is on
(``trace_tasks``): off, a task pays one flag check.
"""

import logging

from celery.exceptions import Ignore

from scheduling.core import task_names, traceparent
from scheduling.core.lifecycle import Status
from scheduling.core.task_names import DELIVER
from scheduling.observability import tracing

log = logging.getLogger(__name__)
H_MESSAGE_ID = "x-dp-message-id"  # wire.H_MESSAGE_ID; wire imports models, too early here
H_TRACEPARENT = "traceparent"  # wire.H_TRACEPARENT
# the platform's own tasks (task_names): their copies of x-dp-* headers are theirs to read
PLATFORM_TASKS = frozenset(v for k, v in vars(task_names).items() if k.isupper() and isinstance(v, str))
_SPAN = "_dp_trace"  # the request's attribute that holds its span until task_postrun
# the request's attribute naming the message whose ordering key's turn a claimed celery_queue task holds
ORDERED_BY = "dp_ordered_by"
# Celery's final state -> the span's outcome (tracing._end marks failed and retry as errors)
_OUTCOMES = {"SUCCESS": "delivered", "FAILURE": "failed", "RETRY": "retry", "IGNORED": "ignored",
             "REJECTED": "rejected"}


def claim_around(before_start):
    """Wrap a task class's ``before_start`` (Celery calls it in the worker right before the task
    body, inside the part of the trace where ``Ignore`` skips the task cleanly)."""

    def before_start_claimed(self, task_id, args, kwargs):
        message_id = self.request.get(H_MESSAGE_ID)
        if message_id and not self.request.is_eager and self.name != DELIVER:
            redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
            carried = _carried(self, message_id, task_id, args, kwargs)
            parent = traceparent.parse(self.request.get(H_TRACEPARENT)) if tracing.ENABLED else None
            claim = (_claim_traced(self, message_id, redelivered, parent, carried) if parent
                     else _claim(message_id, redelivered, self.request.hostname or "", carried))
            if not claim.run:
                log.info("task %s[%s] skipped: cancelled, already run, not its ordering key's turn (waiting), "
                         "or its row is missing (set aside)", self.name, task_id)
                raise Ignore()
            if claim.ordered:  # its key's turn ends with the task (task_postrun: _ordered_task_ended)
                setattr(self.request, ORDERED_BY, claim.ordered)
        return before_start(self, task_id, args, kwargs)

    return before_start_claimed


def _carried(task, message_id: str, task_id: str, args, kwargs):
    """What the copy carried, kept for the operator if its row is missing (delivery/orphans.py)."""
    from scheduling.delivery.orphans import orphan_copy_carried_by_task

    return orphan_copy_carried_by_task(request=task.request, message_id=message_id, attempt=0, task=task.name,
                                  args=args, kwargs=kwargs, task_id=task_id)


def _claim(message_id: str, redelivered: bool, by: str, carried):
    from scheduling.celery.services import celery_task_claim_message

    return celery_task_claim_message(message_id=message_id, redelivered=redelivered, by=by, carried=carried)


def _claim_traced(task, message_id: str, redelivered: bool, parent: str, carried):
    """The claim inside the task's deliver span; a skipped task's span ends here, a run's when
    the task ends (task_postrun)."""
    started = tracing.task_start(parent=parent, message_id=message_id, task=task.name)
    try:
        claim = _claim(message_id, redelivered, task.request.hostname or "", carried)
    except BaseException:
        tracing.task_end(started, "error")
        raise
    message = claim.message
    if message is not None:
        tracing.task_label(started, team=message.endpoint.team.name, endpoint=message.endpoint.name,
                           lateness_ms=message.lateness_ms if claim.run else None)
    if not claim.run:
        ended = message.status if message is not None else None
        tracing.task_end(started, ended if ended in (Status.CANCELLED, Status.EXPIRED, Status.WAITING, Status.SKIPPED)
                         else "duplicate")
        return claim
    setattr(task.request, _SPAN, started)
    return claim


def _task_ended(sender=None, task=None, state=None, **_) -> None:
    """Celery's ``task_postrun`` (sent whatever became of the task): end its deliver span."""
    request = getattr(task, "request", None)
    started = getattr(request, _SPAN, None)
    if started is not None:
        setattr(request, _SPAN, None)
        tracing.task_end(started, _OUTCOMES.get(state, str(state).lower()))


def _ordered_task_ended(sender=None, task_id=None, task=None, state=None, **_) -> None:
    """Celery's ``task_postrun`` in the worker that ran the task: a task handed over in its ordering
    key's turn (a celery_task endpoint's: header ``dp_ordered``, its task id is the message's; a
    celery_queue endpoint's: marked by its claim, ORDERED_BY) ends the turn, and the next message of
    the key is woken; a retry keeps it (its lease runs again). Any other task pays two lookups."""
    request = getattr(task, "request", None)
    if request is None:
        return
    holder = getattr(request, ORDERED_BY, None) or (task_id if request.get("dp_ordered") else None)
    if not holder:
        return
    from scheduling.messages.ordering import ordering_task_ended  # models: not at import time

    try:
        ordering_task_ended(message_id=holder, retrying=state == "RETRY")
    except Exception:  # the lease (and the sweep) end the turn instead; the task's outcome stands
        log.exception("ordered task %s: its key's turn not ended (its lease will end it)", task_id)


def _ordered_task_revoked(sender=None, request=None, **_) -> None:
    """Celery's ``task_revoked``: a revoked ordered task ends its key's turn as if it had run."""
    if request is not None and (getattr(request, "request_dict", None) or {}).get("dp_ordered"):
        from scheduling.messages.ordering import ordering_task_ended

        ordering_task_ended(message_id=request.id, retrying=False)


def _copied_message_id_dropped(sender=None, headers=None, **_) -> None:
    """Celery's ``before_task_publish``: a task of yours published by Celery's own path never names a
    platform message, but Celery's ``retry`` copies the running task's headers into the retry's, and a
    retry (a countdown at or under DELAY_CELERY_THRESHOLD_SECONDS, or a plain task's) carrying its run's
    ``x-dp-message-id`` was claimed as a second copy of that message, already run, and skipped. The
    platform's own tasks keep theirs (``scheduling.deliver`` reads it); the platform publishes its
    messages through kombu (messages/wire.py), never through this signal."""
    if headers and H_MESSAGE_ID in headers and sender not in PLATFORM_TASKS:
        del headers[H_MESSAGE_ID]


def order_tasks() -> None:
    """Connect the end of an ordered task to its key's turn: always (apps.py), not only with tracing;
    and keep a retry on Celery's path from naming its run's message (_copied_message_id_dropped)."""
    from celery.signals import before_task_publish, task_postrun, task_revoked

    task_postrun.connect(_ordered_task_ended, weak=False, dispatch_uid="scheduling.celery.claim.ordered")
    task_revoked.connect(_ordered_task_revoked, weak=False, dispatch_uid="scheduling.celery.claim.ordered_revoked")
    before_task_publish.connect(_copied_message_id_dropped, weak=False,
                                dispatch_uid="scheduling.celery.claim.copied_message_id")


def trace_tasks() -> None:
    """Connect the span's end to every task's end: called once, when tracing is on (apps.py)."""
    from celery.signals import task_postrun

    task_postrun.connect(_task_ended, weak=False, dispatch_uid="scheduling.celery.claim.trace")


class ClaimBeforeStart:
    """The annotation: ``{"@before_start": claim_around}`` for every task (``annotate_any``).
    Celery applies one "every task" annotation, the first it finds: a ``"*"`` annotation of
    your own must include ``"@before_start": scheduling.celery.claim.claim_around`` to keep this."""

    def annotate(self, task):
        return None

    def annotate_any(self):
        return {"@before_start": claim_around}

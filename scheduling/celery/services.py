"""Celery tasks delayed through the cascade: each is a ScheduledMessage row on the endpoint of
its queue (handler ``celery_queue``), whose payload is the task message exactly as apply_async
built it. The row is the outbox and the record: cancellable by task id, counted in reports."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from uuid_utils.compat import uuid7

from .. import lifecycle
from ..errors import BulkValidationError
from ..lifecycle import IN_FLIGHT, Arrival, Status
from ..models import Endpoint, ScheduledMessage
from ..observability import metrics
from ..services.delivery_log import delivery_log_on_commit
from ..services.delivery_minutes import delivery_minute_record
from ..services.endpoints import endpoint_create
from ..services.messages import message_cancel, message_schedule_many

log = logging.getLogger(__name__)


def celery_queue_ensure_endpoint(*, queue: str) -> Endpoint:
    """The endpoint bound for a Celery queue, created on first use (in the default team, bound to
    the queue's exact name, as only the platform's own code and operators may). The queue keeps its
    usual Celery declaration, so its workers need no change."""
    endpoint = Endpoint.objects.select_related("topology", "team").filter(queue=queue).first()
    if endpoint is None:
        try:
            with transaction.atomic():
                endpoint = endpoint_create(name=queue, queue=queue, handler=Endpoint.Handler.CELERY_QUEUE,
                                           check_quota=False)
        except ValidationError as exc:
            if Endpoint.objects.filter(queue=queue).exists():  # created concurrently
                return celery_queue_ensure_endpoint(queue=queue)
            raise ValueError(f"cannot delay tasks for queue {queue!r}: {exc.messages[0]}") from None
    if endpoint.handler != Endpoint.Handler.CELERY_QUEUE:
        raise ValueError(f"queue {queue!r} is the endpoint of another handler ({endpoint.handler})")
    return endpoint


def _key(task_id: str, retries: int) -> str:
    """Scheduling the same task id twice yields one row; a retry of it is a new one."""
    return task_id if not retries else f"{task_id}#retry{retries}"


def celery_task_schedule(*, queue: str, task_id: str, retries: int, due_at: datetime, captured: dict) -> ScheduledMessage:
    endpoint = celery_queue_ensure_endpoint(queue=queue)
    try:
        row_id = uuid.UUID(task_id) if not retries else uuid7()
    except ValueError:
        row_id = uuid7()
    item = {"endpoint": endpoint, "payload": {"celery": captured}, "deliver_at": due_at,
            "idempotency_key": _key(task_id, retries), "id": row_id, "captured_task": True}
    try:
        (result,) = message_schedule_many(items=[item])
    except BulkValidationError as exc:
        raise ValidationError(exc.errors[0]) from None
    except IntegrityError:  # the same UUID task id used on another queue
        item["id"] = uuid7()
        (result,) = message_schedule_many(items=[item])
    return result.message


def celery_task_cancel(*, task_id: str) -> int:
    """Cancel every waiting run of a task id (the first run and any delayed retries). Unlike
    Celery's revoke, this is stored: it survives worker restarts."""
    rows = ScheduledMessage.objects.filter(
        Q(idempotency_key=task_id) | Q(idempotency_key__startswith=f"{task_id}#retry"),
        endpoint__handler=Endpoint.Handler.CELERY_QUEUE,
        status__in=IN_FLIGHT,
    ).values_list("id", flat=True)
    return sum(1 for row_id in list(rows) if message_cancel(message_id=row_id).status == Status.CANCELLED)


def celery_task_claim(*, message_id: str, redelivered: bool, by: str = "") -> bool:
    """Called in the worker before a task that came out of the cascade starts (any task class:
    scheduling.celery.claim hooks every task's before_start): record the delivery and say whether to
    run. A cancelled task, or a duplicate hand-over of one that already ran, is skipped; a
    redelivery after a worker crash (acks_late) runs again, as Celery would."""
    with transaction.atomic():
        message = ScheduledMessage.objects.select_for_update().filter(id=message_id).first()
        if message is None:
            log.warning("task message %s has no row; running it", message_id)
            return True
        was = message.status
        arrival, change = lifecycle.arrive(message, attempt=0, now=timezone.now(), redelivered=redelivered,
                                           rerun_redelivered=True, by=by)
        message.save(update_fields=lifecycle.apply(message, change))
        if arrival is Arrival.DELIVER and was != Status.DELIVERED:  # a rerun after a crash is not a new delivery
            delivery_minute_record(messages=[message])
        metrics.record_on_commit([metrics.arrival(arrival, message, change)])
    if arrival is Arrival.DELIVER:
        delivery_log_on_commit(messages=[message], by=by)
    return arrival is Arrival.DELIVER

"""The far end of the cascade: record a delivery once, suppress duplicates, run the handler.

Everything happens in one transaction with the row locked, so a duplicate arriving at the
same moment waits and then sees the first one's outcome. ``attempt`` is which handler attempt
a task message carries (0 for the one that came through the cascade); a message whose attempt
is not the row's next one is a duplicate.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ..handlers import run_handler
from ..models import Endpoint, ScheduledMessage

log = logging.getLogger(__name__)
Status = ScheduledMessage.Status


class Result(enum.Enum):
    DELIVERED = "delivered"
    DUPLICATE = "duplicate"
    CANCELLED = "cancelled"
    EARLY = "early"
    RETRY = "retry"
    DEFERRED = "deferred"  # left for the one-by-one path (webhooks)
    FAILED = "failed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Outcome:
    result: Result
    attempt: int = 0
    retry_in: float | None = None
    eta: datetime | None = None


def _backoff(attempt: int) -> float:
    return settings.DELAY_HANDLER_BACKOFF_SECONDS * 2 ** (attempt - 1)


def _decide(message: ScheduledMessage | None, message_id: str, attempt: int, now) -> Outcome | None:
    """The rules, before any handler runs: None means "deliver it now"."""
    if message is None:
        log.warning("delivery of unknown message %s dropped", message_id)
        return Outcome(Result.UNKNOWN)
    if now < message.due_at:  # never early: hold it until due
        return Outcome(Result.EARLY, attempt=attempt, eta=message.due_at)
    if attempt == 0:
        message.delivery_count += 1
    if message.status not in (Status.PENDING, Status.PUBLISHED) or attempt != message.attempts:
        return Outcome(Result.CANCELLED if message.status == Status.CANCELLED else Result.DUPLICATE)
    if attempt == 0:
        message.delivered_at = now
        message.lateness_ms = (now - message.due_at) // timedelta(milliseconds=1)
    return None


def _handle(message: ScheduledMessage) -> Outcome:
    """Run the handler and record the result on the (locked) row."""
    try:
        run_handler(message)
    except Exception as exc:
        message.attempts += 1
        message.last_error = f"handler attempt {message.attempts}: {type(exc).__name__}: {exc}"[:2000]
        if message.attempts > settings.DELAY_HANDLER_MAX_RETRIES:
            message.status = Status.FAILED
            log.error("message %s failed after %d attempts: %s", message.id, message.attempts, exc)
            return Outcome(Result.FAILED)
        return Outcome(Result.RETRY, attempt=message.attempts, retry_in=_backoff(message.attempts))
    message.status = Status.DELIVERED
    return Outcome(Result.DELIVERED)


def delivery_receive_many(items: list[tuple[str, int]], *, defer_webhooks: bool = True) -> list[Outcome]:
    """Record a batch of hand-overs in one transaction (one lock query, one write, one commit):
    the delivery loop's path, thousands a second where a transaction per message managed a few
    hundred. ``items`` are (message id, attempt); outcomes come back in the same order. Webhook
    messages come back DEFERRED (untouched): an HTTP call must not hold the batch's locks, so
    the caller hands them to delivery_receive one by one."""
    with transaction.atomic():
        ids = {message_id for message_id, _ in items}
        rows = {
            str(m.id): m
            for m in ScheduledMessage.objects.select_for_update(of=("self",)).select_related("endpoint")
            .defer("payload").filter(id__in=ids)
        }
        now = timezone.now()
        outcomes: list[Outcome | None] = []
        changed, to_handle = {}, []
        for index, (message_id, attempt) in enumerate(items):
            message = rows.get(message_id)
            if defer_webhooks and message is not None and message.endpoint.handler == Endpoint.Handler.WEBHOOK:
                outcomes.append(Outcome(Result.DEFERRED, attempt=attempt))
                continue
            outcome = _decide(message, message_id, attempt, now)
            if message is not None and (outcome is None or outcome.result is not Result.EARLY):
                changed[message.id] = message
            if outcome is None:
                to_handle.append((index, message))
            outcomes.append(outcome)
        with_handlers = [m.id for _, m in to_handle if m.endpoint.handler != Endpoint.Handler.NONE]
        payloads = dict(ScheduledMessage.objects.filter(id__in=with_handlers).values_list("id", "payload")) if with_handlers else {}
        for index, message in to_handle:
            if message.id in payloads:
                message.payload = payloads[message.id]
            outcomes[index] = _handle(message)
        ScheduledMessage.objects.save_delivery_state(list(changed.values()))
    return outcomes


def delivery_receive(*, message_id: str, attempt: int = 0) -> Outcome:
    """One hand-over, in its own transaction (webhooks, and the scheduling.deliver task)."""
    return delivery_receive_many([(message_id, attempt)], defer_webhooks=False)[0]

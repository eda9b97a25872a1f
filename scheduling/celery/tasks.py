"""Celery tasks: thin wrappers that take ids and call one service."""

from datetime import timedelta

from celery import shared_task
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from scheduling.config.conf import broker, conf
from scheduling.core import backoff, task_names
from scheduling.core import traceparent as trace_context
from scheduling.core.clock import from_epoch_ms
from scheduling.delivery.orphans import orphan_copy_carried_by_task, orphan_copy_set_aside
from scheduling.delivery.services import Result, delivery_receive
from scheduling.messages import wire
from scheduling.messages.bulk import message_apply_matching
from scheduling.messages.fanout import message_fan_out
from scheduling.messages.ordering import ordering_sweep
from scheduling.messages.relay import relay_sweep, timeout_publish_due
from scheduling.messages.unroutable import unroutable_drain
from scheduling.models import BulkAction
from scheduling.observability import tracing
from scheduling.reports.services import accuracy_report_run
from scheduling.retention.services import message_prune
from scheduling.schedules.services import schedule_create_runs

BUSY_RETRY_SECONDS = 0.05


@shared_task(name=task_names.RELAY_SWEEP)
def sweep_pending() -> int:
    return relay_sweep().published


@shared_task(name=task_names.ORDERING_SWEEP)
def sweep_ordering() -> int:
    """Beat runs this every 5 s: waiting messages a lost wake left, and holders whose lease passed."""
    return ordering_sweep()


@shared_task(name=task_names.RELAY_TIMEOUTS)
def publish_due_timeouts() -> int:
    return timeout_publish_due().published


@shared_task(name=task_names.SCHEDULE_RUNS)
def create_schedule_runs() -> dict:
    """Beat runs this every DELAY_SCHEDULES_EVERY_SECONDS: the coming runs of recurring schedules."""
    result = schedule_create_runs()
    return {"schedules": result.schedules, "runs": result.runs, "skipped": result.skipped}


@shared_task(name=task_names.BULK_ACTION)
def apply_bulk_action(action_id: int) -> int:
    """The admin's "all matching" cancel or republish, batch by batch (its BulkAction row shows how far)."""
    action = BulkAction.objects.filter(pk=action_id, state=BulkAction.State.RUNNING, done=0).first()
    return message_apply_matching(action=action).done if action else 0


@shared_task(name=task_names.DRAIN_UNROUTABLE)
def drain_unroutable() -> int:
    return unroutable_drain()


@shared_task(
    bind=True,
    name=task_names.DELIVER,
    acks_late=True,  # ack only after the row is committed: a crash redelivers the message
    reject_on_worker_lost=True,  # a killed pool process puts the message back, not acks it
    max_retries=None,
)
def deliver(self, message_id: str, attempt: int = 0) -> str:
    """The fallback for a worker without the delivery loop: one delivery per task. Its message's
    trace (the ``traceparent`` header) goes on to the handler: with tracing on, through a deliver
    span current while the task runs (observability/tracing.py), else as it came."""
    parent = trace_context.parse(self.request.get(wire.H_TRACEPARENT))
    if parent is None or not tracing.ENABLED:
        outcome = _receive(self, message_id, attempt, parent)
    else:
        span = tracing.deliver_start(parent=parent, message_id=message_id, team=None, endpoint=None,
                                     attempt=attempt + 1)
        try:
            with tracing.use(span):
                outcome = _receive(self, message_id, attempt, tracing.header_of(span))
        except BaseException:
            tracing.deliver_end(span, outcome="error", lateness_ms=None)
            raise
        tracing.deliver_end(span, outcome=outcome.result.value, lateness_ms=None)
    if outcome.result is Result.EARLY:
        raise self.retry(eta=outcome.eta)
    if outcome.result is Result.POSTPONED:  # the broker did not take its handler task
        raise self.retry(countdown=backoff.broker(self.request.retries + 1))
    if outcome.result is Result.BUSY:  # its webhook's max_concurrent calls are in flight: nothing recorded
        raise self.retry(countdown=BUSY_RETRY_SECONDS)
    if outcome.result is Result.RETRY:
        raise self.retry(
            kwargs={"message_id": message_id, "attempt": outcome.attempt}, countdown=outcome.retry_in
        )
    return outcome.result.value


def _receive(task, message_id: str, attempt: int, traceparent: str | None):
    try:
        outcome = delivery_receive(message_id=message_id, attempt=attempt, by=task.request.hostname or "",
                                   traceparent=traceparent)
        if outcome.result is Result.UNKNOWN:  # no row (a restore from backup): kept for the operator
            carried = orphan_copy_carried_by_task(request=task.request, message_id=message_id, attempt=attempt,
                                             task=task_names.DELIVER, args=task.request.args,
                                             kwargs=task.request.kwargs)
            orphan_copy_set_aside(copies=[carried], by=task.request.hostname or "")
        return outcome
    except DatabaseError as exc:  # the database is away: keep the message and try again
        close_old_connections()
        raise task.retry(exc=exc, countdown=backoff.database(task.request.retries + 1)) from None


@shared_task(bind=True, name=task_names.DELIVER_ENVELOPE, acks_late=True, reject_on_worker_lost=True)
def deliver_envelope(self, items: list) -> int:
    """The fallback for an envelope (DELAY_ENVELOPES): each message it carries becomes a deliver
    task of its own, due at its own time (a worker with the delivery loop never runs this)."""
    traced = self.request.get(wire.H_TRACEPARENTS)
    for message_id, due_ms in items:
        traceparent = wire.traceparent_of({wire.H_TRACEPARENTS: traced}, message_id) if traced else None
        deliver.apply_async(args=(message_id,), eta=from_epoch_ms(due_ms),
                            headers={wire.H_TRACEPARENT: traceparent} if traceparent else None)
    return len(items)


@shared_task(bind=True, name=task_names.FAN_OUT_EVENT, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def fan_out_event(self, event_id: str, items: list) -> int:
    """The fallback for an event copy (docs/concepts/fan-out.md), run at its eta by a worker
    without the delivery loop: each of the event's rows still waiting gets its own copy to its
    endpoint, as the loop does (messages/fanout.py). Database or broker away: tried again later."""
    # a worker puts a message's headers on the request; an eager apply keeps them under ``headers``
    published_at_ms = self.request.get(wire.H_PUBLISHED_AT_MS, (self.request.headers or {}).get(wire.H_PUBLISHED_AT_MS))
    try:
        result = message_fan_out(event_id=event_id, ids=[str(message_id) for message_id, _ in items],
                                 published_at_ms=published_at_ms if isinstance(published_at_ms, int) else None,
                                 publish=lambda copies: broker().publish(copies, window=conf().publish_window))
    except DatabaseError as exc:
        close_old_connections()
        raise self.retry(exc=exc, countdown=backoff.database(self.request.retries + 1)) from None
    if not result.done:
        raise self.retry(countdown=backoff.broker(self.request.retries + 1))
    return result.published


@shared_task(name=task_names.ACCURACY_NIGHTLY)
def accuracy_report_nightly() -> int:
    """Beat runs this at ACCURACY_REPORT_AT: yesterday's (UTC) report."""
    yesterday = timezone.now().date() - timedelta(days=1)
    return accuracy_report_run(first_day=yesterday).report_rows


@shared_task(name=task_names.PRUNE)
def prune_finished_messages() -> dict:
    """Beat runs this every DELAY_PRUNE_EVERY (hourly): archive, then delete, finished messages
    past their retention and audit rows past theirs; delete orphan copies past theirs. A run that
    finds another one holding the lock does nothing."""
    result = message_prune()
    return {"skipped": result.skipped, "archived": result.archived, "deleted": result.deleted,
            "files": result.files, "kept_in_flight": result.kept_in_flight,
            "audit_archived": result.audit_archived, "audit_deleted": result.audit_deleted,
            "audit_files": result.audit_files, "orphan_copies_deleted": result.orphan_copies_deleted,
            "seconds": round(result.seconds, 1)}

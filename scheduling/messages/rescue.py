"""The safety net under the cascade: a message overdue by ``DELAY_RESCUE_AFTER_MS`` whose row still
says ``published`` is published again, straight to its version's delivery exchange (the last
hop: bindings still decide, and a destination with none ends in the unroutable queue as before).

Why: the broker can hold a copy back for longer than any delay's precision. On RabbitMQ 3.10.8 a
quorum queue's at-least-once dead-letter worker can stop forwarding for 3 to 25 s after a cluster
node dies, although the queue's new leader is up (docs/operations/cluster.md); a hop lost
under at-most-once dead-lettering (v1) never comes at all. The row knows the message is late;
the second copy makes it as late as this setting, not as the broker's recovery. Whichever copy
arrives first is delivered and the other is a duplicate, suppressed by the row's lifecycle like
any copy at-least-once dead-lettering makes: the handler runs once either way.

The delivery loop calls this 4 times per DELAY_RESCUE_AFTER_MS (scheduling/worker/rescuing.py),
unless it holds all its prefetch allows, and passes the overdue ids it holds or is handing over:
those are late because of the loop, and a copy would only add work.

Celery-queue endpoints (every team's) are rescued by the same loop, ``message_rescue_overdue_tasks``:
no platform loop consumes their queues, the user's workers do, and those workers claim each run
before its body starts (scheduling/celery/claim.py in this project, ``POST /api/messages/<id>/claim/``
for the Python client's PlatformTask), so the copy that comes second is skipped there as a
duplicate. While a task queue has messages ready (or had lately) its workers are behind or down and
the copy may be there: its rows wait (workers down: one copy of each lost task, then none while it
waits in the queue). The platform cannot see what those workers hold unacked, so a task's row
is stamped with the copy's publish time and its next copy waits as long as the row was late at
the last one: copies at 1, 2, 4, 8... x DELAY_RESCUE_AFTER_MS, a handful over days, not one every
look (the gauge ``delay_overdue_in_flight_messages`` and its alert say a queue's rows wait).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from datetime import timedelta

from django.db import transaction
from django.db.models import DurationField, Exists, ExpressionWrapper, F, OuterRef, Value
from django.utils import timezone

from rabbit import Outcome, Outgoing
from scheduling.config.conf import conf
from scheduling.core.clock import to_epoch_ms
from scheduling.core.lifecycle import Status
from scheduling.messages import wire
from scheduling.messages.expiry import message_expire_past
from scheduling.messages.selectors import TASK_HANDLERS, TASK_ROUNDING_MS
from scheduling.messages.unroutable import message_build_copies
from scheduling.models import DeliveryMode, EndpointKeyFlow, ScheduledMessage
from scheduling.observability import metrics

log = logging.getLogger(__name__)

# What the rescue serves, and so what relay_claim_new may write as published before the broker has
# it: native rows, of every handler (a Celery queue's by message_rescue_overdue_tasks). One
# declaration for both, read by the queries below and by message_rescue_covers.
RESCUED_MODES = (DeliveryMode.NATIVE,)


def message_rescue_covers(*, message: ScheduledMessage) -> bool:
    return message.delivery_mode in RESCUED_MODES


def message_rescue_overdue(*, queues: Collection[str], skip: Collection[str],
                           publish: Callable[[list[Outgoing]], Outcome], limit: int) -> int:
    """Publish a copy of up to ``limit`` overdue first deliveries of the endpoints whose queues are
    ``queues``, except the ids in ``skip``, whose copy has been in the broker that long too (one
    republished or swept late gets its chance first); return how many the broker confirmed.
    The rows are locked (SKIP LOCKED) while their copies are published, so a row being delivered
    right now, or rescued by another loop, is left alone. ``skip`` should hold only overdue ids
    (it widens the read by its size)."""
    after_ms = conf().rescue_after_ms
    if not after_ms or not queues:
        return 0
    now = timezone.now()
    cutoff = now - timedelta(milliseconds=after_ms)
    with transaction.atomic():
        rows = [row for row in (
            ScheduledMessage.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("endpoint", "topology")
            .only(*wire.PUBLISH_FIELDS)
            .filter(status=Status.PUBLISHED, attempts=0, delivery_mode__in=RESCUED_MODES,
                    due_at__lt=cutoff, published_at__lt=cutoff, endpoint__queue__in=list(queues))
            .exclude(endpoint__handler__in=TASK_HANDLERS)  # never the loop's: message_rescue_overdue_tasks
            # late because of their endpoint's rate limit, not the broker: its slots reach past the cutoff
            .exclude(endpoint__flow__next_slot_us__gt=to_epoch_ms(cutoff) * 1000)
            .exclude(_key_slots_reach_past(cutoff))  # the same for its flow key's rate (flow_slots.py)
            .exclude(call_lease_until__gt=now)  # a webhook call of it is out (delivery/webhook_calls.py)
            .order_by("due_at")[:limit + len(skip)]
        ) if str(row.id) not in skip][:limit]
        return len(_publish(rows, now, publish, after_ms))


def _key_slots_reach_past(cutoff) -> Exists:
    """A row whose flow key's rate slots reach past ``cutoff``: late because of its key's limit, not
    the broker (the key's row, by the (endpoint, key) unique index; a row without a key has none)."""
    return Exists(EndpointKeyFlow.objects.filter(endpoint_id=OuterRef("endpoint_id"), key=OuterRef("flow_key"),
                                                 next_slot_us__gt=to_epoch_ms(cutoff) * 1000))


def message_rescue_overdue_tasks(*, publish: Callable[[list[Outgoing]], Outcome], limit: int,
                                 queue_busy: Callable[[str], bool]) -> int:
    """Publish a copy of up to ``limit`` first runs of Celery-queue endpoints (every team's) overdue
    by DELAY_RESCUE_AFTER_MS beyond their rounding (TASK_ROUNDING_MS), whose copy has been in the
    broker longer than DELAY_RESCUE_AFTER_MS and longer than the row
    was late when it was last published (see the module's docstring); return how many the broker
    confirmed. A queue ``queue_busy`` says has messages ready, or had lately (its workers are behind
    or down, or have just taken a backlog into their prefetch), is left alone: the row's copy may be
    there, and the rows wait until its workers have caught up (a queue drained with the row still
    in flight has lost its copy, or a worker holds it unclaimed: the claim skips whichever copy
    comes second). Each confirmed row's ``published_at`` becomes its copy's (the same instant as the
    copy's ``x-dp-published-at-ms``: an older copy that turns up unroutable is then stale), in the
    transaction that locked it, so another worker's look finds it rescued."""
    after_ms = conf().rescue_after_ms
    if not after_ms:
        return 0
    now = timezone.now()
    cutoff = now - timedelta(milliseconds=after_ms)
    due_cutoff = cutoff - timedelta(milliseconds=TASK_ROUNDING_MS)
    with transaction.atomic():
        rows = list(
            ScheduledMessage.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("endpoint", "topology")
            .only(*wire.PUBLISH_FIELDS)
            .alias(late_then=ExpressionWrapper(F("published_at") - F("due_at"), output_field=DurationField()),
                   since=ExpressionWrapper(Value(now) - F("published_at"), output_field=DurationField()))
            .filter(status=Status.PUBLISHED, attempts=0, delivery_mode__in=RESCUED_MODES,
                    due_at__lt=due_cutoff, published_at__lt=cutoff, endpoint__handler__in=TASK_HANDLERS,
                    late_then__lt=F("since"))
            .exclude(endpoint__flow__next_slot_us__gt=to_epoch_ms(cutoff) * 1000)
            .order_by("due_at")[:limit])
        busy = {queue for queue in {row.endpoint.queue for row in rows} if queue_busy(queue)}
        rows = [row for row in rows if row.endpoint.queue not in busy]
        rescued = _publish(rows, now, publish, after_ms)
        if rescued:
            ScheduledMessage.objects.filter(id__in=[row.id for row in rescued], status=Status.PUBLISHED) \
                .update(published_at=now)
    return len(rescued)


def _publish(rows: list[ScheduledMessage], now, publish: Callable[[list[Outgoing]], Outcome],
             after_ms: int) -> list[ScheduledMessage]:
    """Publish a copy of each row (still locked): the rows the broker confirmed."""
    # past their expires_at: expired, not rescued; what they tell waits for the sweeper (the relay imports this module)
    rows = message_expire_past(rows=rows, now=now, publish=None)
    if not rows:
        return []
    # overdue: no delay; a row none can be built of is failed alone, with the reason, the others still go
    rows, copies, _ = message_build_copies(
        rows=rows, build=lambda row: wire.outgoing(row, row.topology.cascade, now, margin_ms=0)[0])
    if not rows:
        return []
    outcome = publish(copies)
    rescued = [row for index, row in enumerate(rows) if index in outcome.confirmed]
    metrics.rescued(rescued)
    log.warning("rescued %d message(s) overdue by more than %d ms and not delivered (the oldest due %s): "
                "a copy is on their delivery exchange%s", len(rescued), after_ms, rows[0].due_at.isoformat(),
                f"; {len(rows) - len(rescued)} not confirmed ({outcome.error})" if len(rescued) < len(rows) else "")
    return rescued

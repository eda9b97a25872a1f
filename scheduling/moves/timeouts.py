"""Move waiting timeouts from the timeout manager into the native cascade.

Under a row lock, each row is flipped to ``native`` on the target version and committed; from
that moment the timeout manager (which only selects ``timeout_manager`` rows, SKIP LOCKED)
can never publish it, and the relay — the same outbox path as any new message — publishes it
into the cascade with its remaining delay. A row the timeout manager is publishing right now is
locked, skipped here, and delivered by the timeout manager: never both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from scheduling.core.lifecycle import Status
from scheduling.endpoints.services import endpoint_update
from scheduling.messages.relay import relay_publish
from scheduling.models import DeliveryMode, Endpoint, ScheduledMessage, TopologyVersion


@dataclass
class TimeoutMigration:
    endpoints: int = 0  # endpoints switched from the timeout manager to native
    to_move: int = 0  # pending timeouts due at or after the cutoff
    before_cutoff: int = 0  # pending timeouts left to the timeout manager
    moved: int = 0
    published: int = 0


def _pending_timeouts():
    return ScheduledMessage.objects.filter(
        status=Status.PENDING, delivery_mode=DeliveryMode.TIMEOUT_MANAGER
    )


def timeout_migrate(
    *,
    to: TopologyVersion,
    cutoff: datetime,
    dry_run: bool = False,
    batch: int = 1000,
    progress: Callable[[TimeoutMigration], None] | None = None,
) -> TimeoutMigration:
    """Switch timeout-manager endpoints to ``to`` (new messages go native) and move their
    pending timeouts due at or after ``cutoff``; earlier ones stay with the timeout manager."""
    endpoints = list(Endpoint.objects.filter(delivery_mode=DeliveryMode.TIMEOUT_MANAGER))
    result = TimeoutMigration(
        endpoints=len(endpoints),
        to_move=_pending_timeouts().filter(due_at__gte=cutoff).count(),
        before_cutoff=_pending_timeouts().filter(due_at__lt=cutoff).count(),
    )
    if dry_run:
        return result
    for endpoint in endpoints:
        endpoint_update(endpoint=endpoint, topology=to, delivery_mode=DeliveryMode.NATIVE)
    while True:
        with transaction.atomic():
            ids = list(
                _pending_timeouts()
                .filter(due_at__gte=cutoff)
                .select_for_update(skip_locked=True)
                .order_by("due_at")
                .values_list("id", flat=True)[:batch]
            )
            if not ids:
                break
            ScheduledMessage.objects.filter(id__in=ids).update(delivery_mode=DeliveryMode.NATIVE, topology=to)
        result.moved += len(ids)
        result.published += relay_publish(ids=[str(i) for i in ids]).published
        if progress:
            progress(result)
    return result

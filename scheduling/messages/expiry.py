"""Expiry on the publishing paths: a row already past its ``expires_at`` when the relay, the
timeout manager or the rescue would publish it is expired instead (lifecycle.expire): its copy
could only be dropped on arrival. The hand-over paths (delivery/services.py, webhook_calls.py, the
Celery claim) enforce it themselves, through lifecycle.arrive. Each path that expires a row tells
it once, where its status changes: message.expired to the team's routes and the row's on_failed
callback (messages/notification_outbox.py). The relay imports this module, so the notification rows are
published after the commit by the publisher its caller hands in (the relay's own; the rescue, which
the relay imports too, leaves them to the relay's sweeper)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import transaction

from scheduling.core import lifecycle
from scheduling.messages.notification_outbox import notification_write_ended
from scheduling.models import ScheduledMessage
from scheduling.observability import metrics


def message_expire_past(*, rows: list[ScheduledMessage], now: datetime,
                        publish: Callable[..., object] | None) -> list[ScheduledMessage]:
    """Expire the locked rows of ``rows`` past their expires_at (counted once committed, told in
    this transaction: ``publish(rows=...)`` publishes what they tell after the commit; None: the
    relay's sweeper does, as any pending row); returns the others, still to publish. One statement
    for those expired (and one for what they tell), none when there are none."""
    past = [row for row in rows if lifecycle.expired(row, now=now)]
    if not past:
        return rows
    for row in past:
        lifecycle.apply(row, lifecycle.expire(row, now=now))
    ScheduledMessage.objects.bulk_update(past, ["status", "finished_at", "last_error"])
    metrics.expired(past)
    told = notification_write_ended(expired=[row.id for row in past]).rows  # (notifications themselves: none)
    if told and publish is not None:
        transaction.on_commit(lambda: publish(rows=told))
    gone = {row.id for row in past}
    return [row for row in rows if row.id not in gone]

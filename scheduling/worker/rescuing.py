"""The delivery loop's look for stuck copies (messages/rescue.py): how often it looks (4 times per
DELAY_RESCUE_AFTER_MS while it finds some, 2 while it finds none), when it does not (the loop
behind), what it skips (what the loop holds or is handing over), and when a Celery queue's workers
may still hold an overdue task's copy.

Apart from the loop because it is its own clock and its own reads: one loop of a worker looks (every
loop of it consumes the same queues), and the look reads the in-flight index up to its cutoff, dead
entries included: ~33 ms at 100,000 deliveries since the last vacuum, so not 4 times a second in
every loop."""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError, close_old_connections

from scheduling.config.conf import DelaySettings
from scheduling.core.clock import now_ms
from scheduling.messages.rescue import message_rescue_overdue, message_rescue_overdue_tasks
from scheduling.worker.calls import WebhookCalls
from scheduling.worker.holding import Holding
from scheduling.worker.session import Session

log = logging.getLogger(__name__)


class Rescue:
    def __init__(self, settings: DelaySettings, enabled: bool, session: Session, holding: Holding,
                 calls: WebhookCalls):
        self.settings, self.enabled = settings, enabled
        self.session, self.holding, self.calls = session, holding, calls
        self.task_queues = False  # some team has a celery_queue endpoint: the rescue looks at them too (QueueSync)
        self.task_queue_seen_busy: dict[str, float] = {}  # Celery queue -> when it last had messages ready
        self.next_at = 0.0  # time.monotonic() of the next look (0: at the session's first turn)

    def turn(self) -> None:
        """A look when its time has come; the next one sooner while looks find some."""
        if self.enabled and self.settings.rescue_after_ms and time.monotonic() >= self.next_at:
            found = self.look()
            # 4 looks a rescue while it finds some, 2 while it finds none
            self.next_at = time.monotonic() + self.settings.rescue_after_ms / (4000 if found else 2000)

    def look(self) -> int:
        """Messages overdue by DELAY_RESCUE_AFTER_MS that this loop neither holds nor is handing
        over: their copy is stuck in the broker (messages/rescue.py). Not while the loop is behind:
        its prefetch full (unacked broker messages, an envelope counting once), or messages ready
        in its hold for half the setting (a copy of each overdue message would double the work of a
        burst it has not caught up with, and the delivery rate would collapse).
        Then, if any team has one, the Celery-queue endpoints of every team, whose queues no loop
        consumes (the user's workers do); not while behind either: their look reads the same
        overdue index range, and a burst's backlog is in it.
        The copies' confirms are waited for 1 s at most: a queue whose leader is being elected must
        not stop the loop."""
        settings, consumer = self.settings, self.session.consumer
        if len(consumer.unsettled) >= settings.delivery_prefetch:
            return 0
        if self.holding.behind_ms(now_ms()) > settings.rescue_after_ms / 2 or self.calls.parked:
            return 0  # behind (a burst, or calls waiting for their endpoint's bulkhead): they wait in the loop
        skip = self.holding.ids_due_before(now_ms() - settings.rescue_after_ms) | self.calls.in_webhooks

        def publish(copies):
            return consumer.publish(copies, timeout=1.0)

        try:
            found = message_rescue_overdue(queues=consumer.queues, skip=skip, publish=publish,
                                           limit=settings.delivery_batch)
            if self.task_queues:
                found += message_rescue_overdue_tasks(publish=publish, limit=settings.delivery_batch,
                                                      queue_busy=self._task_queue_busy)
            return found
        except DatabaseError as exc:
            close_old_connections()
            log.warning("overdue check skipped: database unavailable (%s)", exc)
            return 0

    def _task_queue_busy(self, name: str) -> bool:
        """Whether a Celery queue's workers may still hold an overdue task's copy: its queue has
        messages ready, or had within 2 x DELAY_RESCUE_AFTER_MS (they took them into their prefetch,
        where they wait for a pool slot, unclaimed), or this loop's session is that young (a worker
        restarting takes its own queues' backlog first). A queue gone is not busy: the copy ends
        unroutable and the row failed, with the reason."""
        now, grace = time.monotonic(), 2 * self.settings.rescue_after_ms / 1000
        if self.session.consumer.queue_ready(name):
            self.task_queue_seen_busy[name] = now
        return now - max(self.task_queue_seen_busy.get(name, float("-inf")), self.session.started) < grace

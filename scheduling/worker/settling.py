"""How the delivery loop settles the copies whose outcome is decided (a hand-over committed, a
webhook's result recorded): acked in one write, a handler retry published first, an early or
postponed copy held again; a copy naming no row set aside before its ack; an envelope acked once
its last message is settled, never when it was given back whole.

Apart from the loop because this is where "ack only after commit" is kept: everything that acks a
delivered copy is here, with the envelopes' count of messages not yet settled."""

from __future__ import annotations

import logging

from django.db import DatabaseError, close_old_connections

import rabbit
from scheduling.core.clock import from_epoch_ms, now_ms, to_epoch_ms
from scheduling.delivery.orphans import Carried, orphan_copy_set_aside
from scheduling.delivery.services import Outcome, Result, delivery_retry_unsent
from scheduling.messages import wire
from scheduling.observability import tracing
from scheduling.worker.holding import Held, Holding
from scheduling.worker.session import Session
from scheduling.worker.traces import Traces

log = logging.getLogger(__name__)


class Settling:
    def __init__(self, session: Session, holding: Holding, traces: Traces, worker_name: str):
        self.session, self.holding, self.traces, self.worker_name = session, holding, traces, worker_name
        self.parts: dict[int, int] = {}  # delivery tag of an envelope -> its messages not yet settled
        self.given_back: set[int] = set()  # envelopes rejected whole while a message of theirs was at a webhook

    def envelope(self, tag: int, messages: int) -> None:
        """An envelope arrived: acked once every message in it is settled."""
        self.parts[tag] = messages

    def give_back(self, tag: int) -> None:
        """The broker message is rejected whole: a message of it settled later does not ack it."""
        if self.parts.pop(tag, None) is not None:
            self.given_back.add(tag)

    def clear(self) -> None:
        """The connection is gone: its broker messages come back on the next one."""
        self.parts.clear()
        self.given_back.clear()

    def settle_all(self, decided: list[tuple[Held, Outcome]]) -> None:
        """Settle a batch, then ack it in one write (as few frames as AMQP's multiple ack allows).
        If a retry cannot be published the session ends: every retry of the batch not yet sent is
        forgotten on its row first, since its held copy, unacked, comes back and must deliver."""
        decided = self._set_aside_orphans(decided)
        if tracing.ENABLED:
            self.traces.settled(decided)
        settled = []
        for index, (held, outcome) in enumerate(decided):
            try:
                if self._settle(held, outcome) and self._last_part(held):
                    settled.append(held.message)
            except rabbit.BrokerUnavailable:
                for later, later_outcome in decided[index + 1:]:
                    if later_outcome.result is Result.RETRY:
                        delivery_retry_unsent(message_id=later.delivery.message_id, attempt=later_outcome.attempt)
                raise
        self.session.consumer.ack_many(settled)

    def _set_aside_orphans(self, decided: list[tuple[Held, Outcome]]) -> list[tuple[Held, Outcome]]:
        """Copies whose row is missing (UNKNOWN) are kept for the operator, with what they carried,
        before they are acked (delivery/orphans.py); with the database away they are held and tried
        again, unacked, like any delivery."""
        orphans = [held for held, outcome in decided if outcome.result is Result.UNKNOWN]
        if not orphans:
            return decided
        try:
            orphan_copy_set_aside(copies=[Carried(h.delivery.message_id, h.delivery.attempt, h.message.queue,
                                                  h.delivery.stamped_due_ms, h.message.headers, h.message.body)
                                          for h in orphans], by=self.worker_name)
        except DatabaseError as exc:
            close_old_connections()
            waits = [self.holding.database_failed(held, now_ms()) for held in orphans]
            log.warning("%d cop(ies) naming no row not set aside yet: database unavailable (%s); retry in %gs, "
                        "unacked", len(orphans), exc, min(waits))
            return [(held, outcome) for held, outcome in decided if outcome.result is not Result.UNKNOWN]
        return decided

    def _last_part(self, held: Held) -> bool:
        """Whether ``held`` was the last unsettled message of its broker message (a lone message
        always is): only then may the broker message be acked."""
        if held.message.tag in self.given_back:  # rejected already: it comes back whole
            return False
        left = self.parts.get(held.message.tag)
        if left is None:
            return True
        if left > 1:
            self.parts[held.message.tag] = left - 1
            return False
        del self.parts[held.message.tag]
        return True

    def _settle(self, held: Held, outcome: Outcome) -> bool:
        """Whether the message is done with (to be acked): not when it came early."""
        if outcome.result is Result.EARLY:  # clocks disagree: wait for the row's due time
            self.holding.hold_until(held, to_epoch_ms(outcome.eta))
            return False
        if outcome.result is Result.POSTPONED:  # the broker did not take its handler task: soon again
            self.holding.broker_failed(held, now_ms())
            return False
        if outcome.result is Result.RETRY:
            self.publish_retry(held, outcome)
        return True

    def publish_retry(self, held: Held, outcome: Outcome) -> None:
        """The next handler attempt: the same message again, due after the backoff, straight to
        where this one came from (the delivery exchange, or the queue)."""
        eta = from_epoch_ms(now_ms() + int(outcome.retry_in * 1000))
        out = wire.retry(held.message, held.delivery.message_id, outcome.attempt, eta)
        try:
            result = self.session.consumer.publish([out])
            problem = None if result.confirmed else f"not confirmed: {result.error or result.failed}"
        except rabbit.BrokerUnavailable as exc:
            problem = str(exc)
        if problem is not None:  # the held copy stays unacked and comes back: it must deliver again
            delivery_retry_unsent(message_id=held.delivery.message_id, attempt=outcome.attempt)
            raise rabbit.BrokerUnavailable(f"retry of {held.delivery.message_id}: {problem}")

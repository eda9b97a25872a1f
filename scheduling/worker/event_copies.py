"""The event copies the delivery loop holds (docs/concepts/fan-out.md): each is held like a delivery
until the arrival margin before its due time, handed to the fan-out thread (fanning.py) and, when
its result comes back, acked, or held again with the backoff, or until due (a Celery queue's rows).

Apart from the loop because the copies are fanned out, not delivered: their own map by delivery
tag, their own thread, their own settling; the loop only tells them from deliveries as they arrive
and as they come due. The copy belongs to the loop's broker connection, so only a result of the
connection it came on acks it."""

from __future__ import annotations

import logging

from rabbit import Received
from scheduling.core.clock import now_ms
from scheduling.messages import wire
from scheduling.worker.fanning import Fanning, FanOutThread
from scheduling.worker.holding import Held, Holding
from scheduling.worker.session import Session

log = logging.getLogger(__name__)


class EventCopies:
    def __init__(self, worker_name: str, session: Session, holding: Holding):
        self.session, self.holding = session, holding
        self.copies: dict[int, wire.EventCopy] = {}  # delivery tag -> an event copy held for its fan-out
        self.fanning = FanOutThread(worker_name)  # fans them out (fanning.py)
        self.fanning_out: set[int] = set()  # event copies at the fan-out thread

    def clear(self) -> None:
        """The connection is gone: the copies come back on the next one (results of this one dropped)."""
        self.copies.clear()
        self.fanning_out.clear()

    def hold(self, message: Received, event: wire.EventCopy) -> None:
        """An event copy arrived: held in the loop's timer as a delivery is, to be fanned out as it comes due."""
        self.copies[message.tag] = event  # fanned out as it arrives (fan_out)
        self.holding.hold(message, wire.Delivery(f"event:{event.event_id}", 0, now_ms(), stamped=False))

    def fan_out_due(self, ready: list[Held]) -> list[Held]:
        """Of the due copies, the events' are fanned out, not delivered: the others are returned."""
        if self.copies and ready:  # events' copies (docs/concepts/fan-out.md): fanned out, not delivered
            copies = [held for held in ready if held.message.tag in self.copies]
            ready = [held for held in ready if held.message.tag not in self.copies]
            self.fan_out(copies)
        return ready

    def fan_out(self, due: list[Held]) -> None:
        """Event copies leave the cascade the arrival margin (or up to a unit more) before due: as
        one arrives, the fan-out thread (fanning.py) sends each of its rows' own copy to its endpoint,
        where this loop or another holds it until due as any copy, so the fan-out's time is not
        added to its lateness; a Celery queue's rows (their task runs on arrival) go at due."""
        for held in due:
            event = self.copies[held.message.tag]
            self.fanning_out.add(held.message.tag)
            self.fanning.submit(Fanning(held, event, self.session.number, tasks=now_ms() >= event.due_ms))

    def fanned(self) -> None:
        """Settle what the fan-out thread did: the event copy acked; held again with the backoff
        when the database was away or copies were not confirmed (never lost: the rows stamped are
        skipped the next time); a Celery queue's rows waiting: held until due. A result of an
        earlier connection is dropped: its event copy came back on this one."""
        acks = []
        while not self.fanning.done.empty():
            item = self.fanning.done.get()
            held, event = item.held, item.event
            if item.session != self.session.number:
                continue
            self.fanning_out.discard(held.message.tag)
            result = item.result
            if item.failed or not result.done:
                backoff = self.holding.database_failed if item.failed == "database" else self.holding.broker_failed
                wait = backoff(held, now_ms())
                log.warning("fan-out of event %s postponed (%s); retry in %gs, unacked", event.event_id,
                            item.errors[:1] or f"{result.unconfirmed} cop(ies) not confirmed", wait)
            elif result.tasks_waiting:  # a Celery queue's rows: at due (never before)
                self.holding.hold_until(held, event.due_ms)
            else:
                del self.copies[held.message.tag]
                acks.append(held.message)
        self.session.consumer.ack_many(acks)

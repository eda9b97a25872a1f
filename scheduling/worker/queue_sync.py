"""The queues the delivery loop follows: every active endpoint's (and the events' fan-out queue,
once provisioned), read from the database every few seconds or when told (``sync_now``). An endpoint
paused or gone stops being consumed and its messages go back to the broker, envelopes whole, parked
ones included.

Apart from the loop because a sync changes what the other parts read, on its own clock: what it
reads goes to the part that uses it (flow limits, webhook profiles, tracing labels, whether the
rescue looks at Celery queues)."""

from __future__ import annotations

import logging

from django.db import DatabaseError, close_old_connections

from scheduling.core.flow_gate import FlowGate
from scheduling.delivery.flow_slots import endpoint_key_flow_forget
from scheduling.delivery.handlers import webhook_profiles
from scheduling.endpoints.selectors import (
    endpoint_any_task_queue,
    endpoint_get_consumption,
    endpoint_get_flow_limits,
    endpoint_get_labels_by_queue,
)
from scheduling.messages import wire
from scheduling.observability import tracing
from scheduling.worker.calls import WebhookCalls
from scheduling.worker.holding import Holding
from scheduling.worker.rescuing import Rescue
from scheduling.worker.session import Session
from scheduling.worker.settling import Settling
from scheduling.worker.traces import Traces

log = logging.getLogger(__name__)


class QueueSync:
    def __init__(self, session: Session, holding: Holding, flow: FlowGate, calls: WebhookCalls, traces: Traces,
                 settling: Settling, rescue: Rescue):
        self.session, self.holding, self.flow, self.calls = session, holding, flow, calls
        self.traces, self.settling, self.rescue = traces, settling, rescue
        self.unknown_reported: set[str] = set()

    def sync(self) -> None:
        consumer = self.session.consumer
        try:
            if not self.calls.holds_slots():  # max_concurrent's slots are this connection's session locks:
                close_old_connections()  # closed (CONN_MAX_AGE) while calls were out, they went to other workers
            wanted = {name for name, active in endpoint_get_consumption().items() if active}
            if wire.FANOUT_QUEUE in consumer.queues or consumer.queue_exists(wire.FANOUT_QUEUE):
                wanted.add(wire.FANOUT_QUEUE)  # events' copies (docs/concepts/fan-out.md), once provisioned
            self.flow.set_limits(endpoint_get_flow_limits())
            if any(limit.per_key_second for limit in self.flow.limits.values()):
                endpoint_key_flow_forget()  # the key slots' table keeps the keys of the last minute (flow_slots.py)
            self.calls.profiles = webhook_profiles()
            if tracing.ENABLED:
                self.traces.labels = endpoint_get_labels_by_queue()
            self.rescue.task_queues = self.rescue.enabled and endpoint_any_task_queue()
        except DatabaseError as exc:
            log.warning("endpoint sync skipped: database unavailable (%s)", exc)
            return
        for name in sorted(wanted - consumer.queues):
            if self._queue_exists(name):
                consumer.consume(name)
                log.info("consuming endpoint queue %s", name)
        for name in sorted(consumer.queues - wanted):
            consumer.cancel(name)
            parked = self.calls.unpark_queue(name)
            released = {held.message.tag: held.message
                        for held in [*self.holding.release(lambda h, name=name: h.message.queue == name), *parked]}
            for tag, message in released.items():  # an envelope goes back once, whole
                self.settling.give_back(tag)
                consumer.reject(message, requeue=True)  # a paused endpoint's messages go back
            log.info("pausing endpoint queue %s (endpoint inactive or gone)", name)

    def _queue_exists(self, name: str) -> bool:
        if self.session.consumer.queue_exists(name):
            return True
        if name not in self.unknown_reported:
            log.warning("endpoint queue %s does not exist on the broker; re-bind the endpoint", name)
            self.unknown_reported.add(name)
        return False

"""The delivery loop's spans (observability/tracing.py; docs/observability/tracing.md): a webhook's
deliver and attempt spans, from its call to its settling; what a handler task is handed; the deliver
span of any other copy, made as it is settled.

Apart from the loop because it is the one part that only tracing reads: its state is three maps
by message id, emptied as the copies are settled, and ``bench/tracing_cost.py`` measures it alone
(no thread, broker or engine)."""

from __future__ import annotations

from scheduling.core import traceparent
from scheduling.core.clock import now_ms
from scheduling.delivery.handlers import WebhookProfile
from scheduling.delivery.services import Outcome, Result
from scheduling.delivery.webhooks import CallResult
from scheduling.messages import wire
from scheduling.observability import tracing
from scheduling.worker.holding import Held


class Traces:
    def __init__(self):
        # tracing on only: queue -> (team, endpoint) names, and the spans of webhook deliveries out
        # (message id -> (deliver span, attempt span))
        self.labels: dict[str, tuple[str, str]] = {}
        self.spans: dict[str, tuple] = {}
        self.deliver_ids: dict[str, str] = {}  # message id -> the traceparent its deliver span will have

    def call(self, held: Held, row, profile: WebhookProfile, headers: dict) -> None:
        """The webhook's ``traceparent``: with tracing on, the attempt span's (a child of this
        delivery's span, both ended later); off, the copy's own, passed on as it came."""
        message_id = held.delivery.message_id
        parent = wire.traceparent_of(held.message.headers, message_id)
        if parent is None:
            return
        if not tracing.ENABLED:
            headers[wire.H_TRACEPARENT] = parent
            return
        if (earlier := self.spans.pop(message_id, None)) is not None:  # its call was handed back: held again
            tracing.deliver_end(earlier[0], outcome="held", lateness_ms=None)
        team, endpoint = self.labels.get(held.message.queue, (None, None))
        deliver = tracing.deliver_start(parent=parent, message_id=message_id, team=team, endpoint=endpoint,
                                        attempt=row.attempt + 1)
        attempt = tracing.attempt_start(deliver, message_id=message_id, team=team, endpoint=endpoint,
                                        attempt=row.attempt + 1, url=profile.url)
        headers[wire.H_TRACEPARENT] = tracing.header_of(attempt)
        self.spans[message_id] = (deliver, attempt)

    def calls_ended(self, ended: list[CallResult]) -> None:
        """The attempt spans of calls that ended; their deliver spans end when they are settled."""
        if self.spans:
            for result in ended:
                if (spans := self.spans.get(result.call.message_id)) is not None and spans[1] is not None:
                    tracing.attempt_end(spans[1], outcome=result.outcome if result.called else "not_called",
                                        status_code=result.status_code, started_s=result.started_at,
                                        duration_ms=result.duration_ms)
                    self.spans[result.call.message_id] = (spans[0], None)

    def handed(self, due: list[Held]) -> dict[str, str] | None:
        """What each traced copy's handler (a Celery task) is handed: with tracing on, the id of
        the deliver span ``settled`` makes for it (chosen now), else the copy's own."""
        handed = None
        for held in due:
            headers = held.message.headers
            if wire.H_TRACEPARENT not in headers and wire.H_TRACEPARENTS not in headers:
                continue
            message_id = held.delivery.message_id
            if (parent := wire.traceparent_of(headers, message_id)) is None:
                continue
            if tracing.ENABLED:
                parent = self.deliver_ids[message_id] = traceparent.child(parent)
            handed = handed or {}
            handed[message_id] = parent
        return handed

    def not_handed(self, message_id: str) -> None:
        """The copy was not handed over after all: its deliver span's id is chosen again next time."""
        if self.deliver_ids:
            self.deliver_ids.pop(message_id, None)

    def settled(self, decided: list[tuple[Held, Outcome]]) -> None:
        """A deliver span for each settled copy that carries a trace: a webhook's, started with its
        call, ends now; any other's is the hand-over just made."""
        now = now_ms()
        for held, outcome in decided:
            message_id = held.delivery.message_id
            spans = self.spans.pop(message_id, None)
            handed = self.deliver_ids.pop(message_id, None) if self.deliver_ids else None  # its task's
            if spans is None:
                parent = wire.traceparent_of(held.message.headers, message_id)
                if parent is None:
                    continue
                team, endpoint = self.labels.get(held.message.queue, (None, None))
                spans = (tracing.deliver_start(parent=parent, message_id=message_id, team=team, endpoint=endpoint,
                                               attempt=held.delivery.attempt + 1,
                                               start_ns=held.delivery.due_ms * 1_000_000
                                               if held.delivery.due_ms < now else None,
                                               span_id=traceparent.span_id(handed) if handed else None), None)
            lateness = now - held.delivery.due_ms if outcome.result is Result.DELIVERED else None
            tracing.deliver_end(spans[0], outcome=outcome.result.value, lateness_ms=lateness)

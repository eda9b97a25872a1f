"""The delivery loop's spans (scheduling/worker/traces.py), alone: no thread, broker or database.
Off (the default), a copy's traceparent is passed on as it came; on (an in-memory exporter in place
of OTLP), a webhook's attempt span is a child of its deliver span, which ends when the copy is
settled, and a handler task is handed the id of the deliver span made for it."""

from types import SimpleNamespace

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rabbit import Received
from scheduling.core import traceparent as tp
from scheduling.core.clock import now_ms
from scheduling.delivery.services import Outcome, Result
from scheduling.messages import wire
from scheduling.observability import tracing
from scheduling.worker.holding import Held
from scheduling.worker.traces import Traces

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def copy(message_id: str = "m-1", parent: str | None = PARENT) -> Held:
    headers = {wire.H_TRACEPARENT: parent} if parent else {}
    message = Received(tag=1, body=b"{}", headers=headers, queue="orders")
    return Held(now_ms(), 0, message, wire.Delivery(message_id, 0, now_ms()))


@pytest.fixture
def spans(monkeypatch):
    """Tracing on for this test, its spans kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=tracing._preset_ids())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("test"))
    monkeypatch.setattr(tracing, "ENABLED", True)
    return exporter


def test_off_a_webhook_is_sent_the_copy_s_traceparent_as_it_came():
    headers = {}
    Traces().call(copy(), SimpleNamespace(attempt=0), SimpleNamespace(url="http://127.0.0.1/hook"), headers)
    assert headers == {wire.H_TRACEPARENT: PARENT}


def test_off_a_handler_is_handed_the_copy_s_own_and_nothing_is_kept():
    traces = Traces()
    assert traces.handed([copy("m-1"), copy("m-2", parent=None)]) == {"m-1": PARENT}
    assert (traces.spans, traces.deliver_ids) == ({}, {})


def test_on_the_attempt_span_is_a_child_of_the_deliver_span_and_both_end_by_the_settling(spans):
    traces, held, headers = Traces(), copy(), {}
    traces.labels = {"orders": ("team-a", "orders")}
    traces.call(held, SimpleNamespace(attempt=0), SimpleNamespace(url="http://127.0.0.1/hook"), headers)
    call = SimpleNamespace(message_id="m-1")
    traces.calls_ended([SimpleNamespace(call=call, called=True, outcome="ok", status_code=200, started_at=0.0,
                                        duration_ms=3)])
    assert [s.name for s in spans.get_finished_spans()] == [tracing.ATTEMPT]
    traces.settled([(held, Outcome(Result.DELIVERED))])
    attempt, deliver = spans.get_finished_spans()
    assert attempt.parent.span_id == deliver.context.span_id
    assert f"{deliver.context.trace_id:032x}" == tp.trace_id(PARENT)
    assert headers[wire.H_TRACEPARENT] == tracing.header_of(attempt)
    assert traces.spans == {}


def test_on_a_handler_is_handed_the_id_of_the_deliver_span_made_as_it_is_settled(spans):
    traces, held = Traces(), copy()
    handed = traces.handed([held])["m-1"]
    traces.settled([(held, Outcome(Result.DELIVERED))])
    (deliver,) = spans.get_finished_spans()
    assert f"{deliver.context.span_id:016x}" == tp.span_id(handed)
    assert traces.deliver_ids == {}


def test_on_a_copy_not_handed_over_has_its_span_id_chosen_again(spans):
    traces = Traces()
    traces.handed([copy()])
    traces.not_handed("m-1")
    assert traces.deliver_ids == {}

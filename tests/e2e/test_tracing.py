"""One W3C trace from the API request to the receiver, end to end: a throwaway platform (gunicorn,
a real Celery worker with its delivery loop, consuming a Celery queue's tasks too) exporting over
OTLP/HTTP to a real receiver here, which decodes what it is posted with opentelemetry-proto. A
message scheduled with a ``traceparent`` reaches its receiver -- a webhook, a Celery-queue task, a
celery_task handler -- in the same trace, and the spans schedule -> publish -> deliver (-> attempt)
all arrive, each the child of the one before, with their attributes (docs/observability/tracing.md).
One platform for the module's tests (each its own trace): starting it is most of the time."""

from __future__ import annotations

import gzip
import secrets
from dataclasses import dataclass

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from harness.platform import TEAM, platform
from harness.recording_server import RecordingServer
from harness.waiting import wait_until

pytestmark = pytest.mark.broker

SCHEDULE, PUBLISH, DELIVER, ATTEMPT = "delay.schedule", "delay.publish", "delay.deliver", "delay.webhook_attempt"


def spans_received(collector: RecordingServer) -> list[dict]:
    """Every span the collector was posted: name, ids (hex), parent, attributes, service."""
    spans = []
    for request in list(collector.requests):
        assert request["path"] == "/v1/traces"
        headers = {k.lower(): v for k, v in request["headers"].items()}
        assert headers.get("content-type") == "application/x-protobuf"
        body = request["body"]
        if headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}.get("service.name")
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {}
                    for a in span.attributes:
                        value = a.value
                        attributes[a.key] = value.int_value if value.HasField("int_value") else value.string_value
                    spans.append({"name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                                  "parent": span.parent_span_id.hex(), "attributes": attributes,
                                  "service": service, "start": span.start_time_unix_nano,
                                  "end": span.end_time_unix_nano})
    return spans


@dataclass
class Traced:
    """The platform of this module's tests, exporting to ``collector``: a webhook endpoint
    (``traced``, calling ``receiver``), a Celery queue's (``tasks``, consumed by the worker) and a
    celery_task handler's (``handled``, run by the worker): their handlers see the trace."""

    p: object
    receiver: RecordingServer
    collector: RecordingServer

    def trace(self, trace_id: str, names: tuple) -> dict:
        """The spans of ``trace_id`` by name, once exactly ``names`` arrived."""
        def whole():
            mine = [s for s in spans_received(self.collector) if s["trace_id"] == trace_id]
            return mine if sorted(s["name"] for s in mine) == sorted(names) else None

        return {s["name"]: s for s in wait_until(whole, timeout=30, message=f"the spans {names}")}

    def receipt(self, task_id: str) -> dict:
        (payload,) = wait_until(lambda: self.p.sql("SELECT payload FROM testapp_receipt WHERE message_id = %s",
                                                   task_id), timeout=60, message="the task to run")
        return payload[0]


@pytest.fixture(scope="module")
def traced():
    with RecordingServer() as receiver, RecordingServer() as collector:
        otlp = collector.url.removesuffix("/hook") + "/v1/traces"
        with platform(web_workers=1, settings="delayplatform.settings_test", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=otlp,
                      OTEL_SERVICE_NAME="dp-e2e", OTEL_BSP_SCHEDULE_DELAY="100",
                      DELAY_WEBHOOK_ALLOWED_NETWORKS="127.0.0.1/32") as p:
            p.api("POST", "/api/endpoints/", json={"name": "traced", "topology": "v3", "handler": "webhook",
                                                   "handler_target": receiver.url})
            p.api("POST", "/api/endpoints/", json={"name": "handled", "topology": "v3", "handler": "celery_task",
                                                   "handler_target": "testapp.traced_receipt"})
            tasks = p.api("POST", "/api/endpoints/", json={"name": "tasks", "topology": "v3",
                                                           "handler": "celery_queue"})
            # one worker: the platform's queues, its delivery loop, and the Celery queue's tasks
            p.start_worker("tracing", DELAY_DELIVERY_PROCESSES="1",
                           extra_args=("-Q", f"celery,dp.relay,{tasks['queue']}"))
            yield Traced(p, receiver, collector)


def test_one_trace_from_the_request_to_the_receiver(traced):
    p, receiver = traced.p, traced.receiver
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    message = p.api("POST", "/api/messages/", json={"endpoint": "traced", "payload": {"n": 1}, "delay_seconds": 1},
                    headers={"traceparent": f"00-{trace_id}-{caller_span}-01"})
    # and one with a malformed traceparent: ignored (W3C), its own new trace, never a 400
    other = p.api("POST", "/api/messages/", json={"endpoint": "traced", "payload": {"n": 2}, "delay_seconds": 1},
                  headers={"traceparent": f"00-{trace_id.upper()}-{caller_span}-01"})
    wait_until(lambda: len(receiver.requests) == 2, timeout=60, message="both webhooks called")
    spans = traced.trace(trace_id, (SCHEDULE, PUBLISH, DELIVER, ATTEMPT)).values()
    by_name = {s["name"]: s for s in spans}
    call = next(r for r in receiver.requests if r["headers"]["webhook-id"] == message["id"])
    sent = call["headers"]["traceparent"]
    # the receiver got the trace, named by the attempt span's id
    assert sent == f"00-{trace_id}-{by_name[ATTEMPT]['span_id']}-01"
    # each span the child of the hop before it; the first, the caller's span
    assert by_name[SCHEDULE]["parent"] == caller_span
    assert by_name[PUBLISH]["parent"] == by_name[SCHEDULE]["span_id"]
    assert by_name[DELIVER]["parent"] == by_name[PUBLISH]["span_id"]
    assert by_name[ATTEMPT]["parent"] == by_name[DELIVER]["span_id"]
    for span in spans:
        assert span["service"] == "dp-e2e"
        assert span["attributes"]["delay.message_id"] == message["id"], span
        assert span["attributes"]["delay.endpoint"] == "traced", span
        assert span["end"] >= span["start"] > 0
    for name in (SCHEDULE, PUBLISH, DELIVER, ATTEMPT):
        assert by_name[name]["attributes"]["delay.team"] == TEAM, by_name[name]
    assert by_name[SCHEDULE]["attributes"]["delay.outcome"] == "scheduled"
    assert by_name[PUBLISH]["attributes"]["delay.outcome"] == "published"
    assert by_name[DELIVER]["attributes"]["delay.outcome"] == "delivered"
    assert 0 <= by_name[DELIVER]["attributes"]["delay.lateness_ms"] < 5000
    assert by_name[ATTEMPT]["attributes"]["delay.outcome"] == "ok"
    assert by_name[ATTEMPT]["attributes"]["http.response.status_code"] == 200
    # the malformed one: a trace of its own, which its receiver was sent
    other_call = next(r for r in receiver.requests if r["headers"]["webhook-id"] == other["id"])
    assert other_call["headers"]["traceparent"].split("-")[1] != trace_id


def test_a_celery_queue_task_runs_in_the_trace_of_its_message(traced):
    """The task message carries the publish span's traceparent (self.request.traceparent); the
    worker's claim continues it: a deliver span, current while the body runs, with the team, the
    endpoint, the outcome and the lateness."""
    p = traced.p
    trace_id, caller_span, task_id = secrets.token_hex(16), secrets.token_hex(8), f"traced-{secrets.token_hex(4)}"
    message = p.api("POST", "/api/messages/", json={
        "endpoint": "tasks", "delay_seconds": 1,
        "payload": {"task": "testapp.traced_receipt", "args": ["queued"], "id": task_id}},
        headers={"traceparent": f"00-{trace_id}-{caller_span}-01"})
    receipt = traced.receipt(task_id)
    spans = traced.trace(trace_id, (SCHEDULE, PUBLISH, DELIVER))
    assert receipt["args"] == ["queued"]
    assert receipt["traceparent"] == f"00-{trace_id}-{spans[PUBLISH]['span_id']}-01"  # what the copy carried
    assert receipt["current"] == f"{trace_id}-{spans[DELIVER]['span_id']}"  # the body ran in the deliver span
    assert spans[PUBLISH]["parent"] == spans[SCHEDULE]["span_id"]
    assert spans[DELIVER]["parent"] == spans[PUBLISH]["span_id"]
    deliver = spans[DELIVER]["attributes"]
    assert deliver["delay.message_id"] == message["id"] and deliver["celery.task_name"] == "testapp.traced_receipt"
    assert (deliver["delay.team"], deliver["delay.endpoint"], deliver["delay.outcome"]) == (TEAM, "tasks", "delivered")
    assert 0 <= deliver["delay.lateness_ms"] < 5000


def test_a_celery_task_handler_is_handed_the_deliver_span_of_its_message(traced):
    """A celery_task endpoint: the delivery loop sends the handler task with the id of the
    message's deliver span (chosen before the send), the span the collector then receives."""
    p = traced.p
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    message = p.api("POST", "/api/messages/", json={"endpoint": "handled", "payload": {"n": 3}, "delay_seconds": 1},
                    headers={"traceparent": f"00-{trace_id}-{caller_span}-01"})
    receipt = traced.receipt(message["id"])  # the handler task's id is the message's
    spans = traced.trace(trace_id, (SCHEDULE, PUBLISH, DELIVER))
    assert receipt["args"] == [{"n": 3}]
    assert receipt["traceparent"] == f"00-{trace_id}-{spans[DELIVER]['span_id']}-01"
    assert spans[DELIVER]["parent"] == spans[PUBLISH]["span_id"]
    assert spans[DELIVER]["attributes"]["delay.outcome"] == "delivered"
    assert spans[DELIVER]["attributes"]["delay.endpoint"] == "handled"

"""One W3C trace from the API request to the webhook's receiver, end to end: a throwaway platform
(gunicorn, a real Celery worker with its delivery loop) exporting over OTLP/HTTP to a real receiver
here, which decodes what it is posted with opentelemetry-proto. A message scheduled with a
``traceparent`` reaches its receiver with a ``traceparent`` of the same trace, and the spans
schedule -> publish -> deliver -> attempt all arrive, each the child of the one before, with their
attributes (docs/observability/tracing.md)."""

from __future__ import annotations

import gzip
import secrets

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


def test_one_trace_from_the_request_to_the_receiver():
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    with RecordingServer() as receiver, RecordingServer() as collector:
        otlp = collector.url.removesuffix("/hook") + "/v1/traces"
        with platform(web_workers=1, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=otlp, OTEL_SERVICE_NAME="dp-e2e",
                      OTEL_BSP_SCHEDULE_DELAY="100", DELAY_WEBHOOK_ALLOWED_NETWORKS="127.0.0.1/32") as p:
            p.start_worker("tracing", DELAY_DELIVERY_PROCESSES="1")
            p.api("POST", "/api/endpoints/", json={"name": "traced", "topology": "v3", "handler": "webhook",
                                                   "handler_target": receiver.url})
            message = p.api("POST", "/api/messages/", json={"endpoint": "traced", "payload": {"n": 1},
                                                            "delay_seconds": 1},
                            headers={"traceparent": f"00-{trace_id}-{caller_span}-01"})
            # and one with a malformed traceparent: ignored (W3C), its own new trace, never a 400
            other = p.api("POST", "/api/messages/", json={"endpoint": "traced", "payload": {"n": 2},
                                                          "delay_seconds": 1},
                          headers={"traceparent": f"00-{trace_id.upper()}-{caller_span}-01"})
            wait_until(lambda: len(receiver.requests) == 2, timeout=60, message="both webhooks called")
            names = (SCHEDULE, PUBLISH, DELIVER, ATTEMPT)

            def whole_trace():
                mine = [s for s in spans_received(collector) if s["trace_id"] == trace_id]
                return mine if sorted(s["name"] for s in mine) == sorted(names) else None

            spans = wait_until(whole_trace, timeout=30, message="the four spans of the trace")
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

"""OpenTelemetry tracing: a message's trace from the API to its receiver (docs/observability/tracing.md).

Off by default, and free when off: ``ENABLED`` is a module-level flag that every hot path checks
before it builds a span or formats a header (bench/tracing_cost.py measures it). It is set once per
process by :func:`tracing_start` (the app's ready()) when the standard variables ask for an exporter
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_TRACES_EXPORTER=otlp``;
``OTEL_TRACES_EXPORTER=none`` wins). The SDK and its OTLP/HTTP exporter are imported only then; the
SDK reads its other variables itself (``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``, ``OTEL_RESOURCE_ATTRIBUTES``).

What a message carries, on or off, is its ``traceparent`` (the row's column, the broker message's
header, the webhook's header, the Celery task's header): a caller's is passed on as it came when
tracing is off. With tracing on each hop makes its span in that trace and passes on its own id:

    schedule (API, the scheduling service) -> publish (relay) -> deliver (worker) -> attempt (webhook)

The spans of a hop that only knows its id once the broker confirmed (publish) or the call ended
(attempt) are started with an id chosen beforehand (``_PresetIds``): the header that goes out names
the span that the collector receives later.
"""

from __future__ import annotations

import threading
import time

from scheduling.core import traceparent as tp

ENABLED = False  # the one check on every hot path
SERVICE_NAME = "delay-platform"
TRACER_NAME = "delayplatform"

# span names and attribute keys, spelled once
SCHEDULE, PUBLISH, DELIVER, ATTEMPT = "delay.schedule", "delay.publish", "delay.deliver", "delay.webhook_attempt"
TEAM, ENDPOINT, OUTCOME, LATENESS_MS, MESSAGE_ID = (
    "delay.team", "delay.endpoint", "delay.outcome", "delay.lateness_ms", "delay.message_id")
ATTEMPT_NO, STATUS_CODE = "delay.attempt", "http.response.status_code"

_tracer = None
_preset = threading.local()  # the span id the next span of this thread takes (see _PresetIds)


def wanted(*, endpoint: str, traces_endpoint: str, exporter: str) -> bool:
    """Whether the standard variables ask for traces to be exported."""
    if exporter == "none":
        return False
    return exporter == "otlp" or bool(endpoint or traces_endpoint)


def tracing_start(settings=None) -> bool:
    """Set tracing up for this process if the settings ask for it (once; later calls do nothing).
    Returns whether it is on."""
    global ENABLED, _tracer
    if _tracer is not None:
        return ENABLED
    if settings is None:
        from scheduling.config.conf import conf

        settings = conf()
    if not wanted(endpoint=settings.otel_exporter_otlp_endpoint,
                  traces_endpoint=settings.otel_exporter_otlp_traces_endpoint,
                  exporter=settings.otel_traces_exporter):
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    traces_url = settings.otel_exporter_otlp_traces_endpoint or (
        (settings.otel_exporter_otlp_endpoint or "http://localhost:4318").rstrip("/") + "/v1/traces")
    provider = TracerProvider(resource=Resource.create({"service.name": settings.otel_service_name or SERVICE_NAME}),
                              id_generator=_preset_ids())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url)))
    trace.set_tracer_provider(provider)
    _tracer = provider.get_tracer(TRACER_NAME)
    ENABLED = True
    return True


def tracing_flush(timeout_ms: int = 5000) -> None:
    """Export what is buffered now (a short-lived command, a test)."""
    if ENABLED:
        from opentelemetry import trace

        trace.get_tracer_provider().force_flush(timeout_ms)


def _preset_ids():
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class _PresetIds(RandomIdGenerator):
        """A span's id is random, unless the caller chose it before (its header went out first)."""

        def generate_span_id(self) -> int:
            chosen = getattr(_preset, "span_id", None)
            if chosen is not None:
                _preset.span_id = None
                return chosen
            return super().generate_span_id()

    return _PresetIds()


def _parent(traceparent: str | None):
    """The OpenTelemetry context of a traceparent (None: a new trace)."""
    if not traceparent:
        return None
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    context = SpanContext(int(tp.trace_id(traceparent), 16), int(tp.span_id(traceparent), 16), is_remote=True,
                          trace_flags=TraceFlags(int(traceparent[53:55], 16)))
    return trace.set_span_in_context(NonRecordingSpan(context))


def header_of(span) -> str:
    """The traceparent that names ``span``."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _start(name: str, parent: str | None, attributes: dict, *, start_ns: int | None = None,
           span_id: str | None = None, kind=None):
    from opentelemetry.trace import SpanKind

    if span_id is not None:
        _preset.span_id = int(span_id, 16)
    try:
        return _tracer.start_span(name, context=_parent(parent), kind=kind or SpanKind.INTERNAL,
                                  attributes={k: v for k, v in attributes.items() if v is not None},
                                  start_time=start_ns)
    finally:
        _preset.span_id = None


def _end(span, outcome: str, end_ns: int | None = None, **attributes) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute(OUTCOME, outcome)
    for key, value in attributes.items():
        if value is not None:
            span.set_attribute(key, value)
    if outcome in ("failed", "error", "timeout", "refused", "http_error", "too_large", "retry"):
        span.set_status(Status(StatusCode.ERROR, outcome))
    span.end(end_time=end_ns)


# --- schedule: the API and every caller of the scheduling service -----------------------------


def schedule_start(*, parent: str | None, team: str, endpoint: str):
    """A message's schedule span, in the caller's trace (``parent``) or a new one. Returns it; the
    row keeps ``header_of(span)``."""
    from opentelemetry.trace import SpanKind

    return _start(SCHEDULE, parent, {TEAM: team, ENDPOINT: endpoint}, kind=SpanKind.SERVER)


def schedule_end(spans: list, rows: list, outcome: str) -> None:
    """End the schedule spans of a request, each with its message's id."""
    for span, row in zip(spans, rows):
        span.set_attribute(MESSAGE_ID, str(row.id))
        _end(span, outcome)


# --- publish: the relay --------------------------------------------------------------------------


def publish_prepare(rows) -> None:
    """Before a batch is built: each row with a trace gets the traceparent its broker message will
    carry (``wire_traceparent``, a publish span's id chosen now) and the time its publish began."""
    now = time.time_ns()
    for row in rows:
        if traceparent := row.__dict__.get("traceparent"):
            row.wire_traceparent = tp.child(traceparent)
            row.publish_started_ns = now


def publish_end(rows, outcome: str) -> None:
    """The publish spans of rows the broker confirmed (``published``) or did not (``failed``)."""
    from opentelemetry.trace import SpanKind

    for row in rows:
        sent = getattr(row, "wire_traceparent", None)
        if not sent:
            continue
        endpoint = row.endpoint
        team = endpoint._state.fields_cache.get("team")  # loaded by the API's rows, not the sweeper's
        span = _start(PUBLISH, row.__dict__.get("traceparent"), {
            MESSAGE_ID: str(row.id), ENDPOINT: endpoint.__dict__.get("name") or endpoint.__dict__.get("queue"),
            TEAM: team.name if team is not None else None,
            "messaging.system": "rabbitmq", "messaging.destination.name": row.first_exchange or None,
            "messaging.rabbitmq.destination.routing_key": row.routing_key or None,
        }, start_ns=getattr(row, "publish_started_ns", None), span_id=tp.span_id(sent), kind=SpanKind.PRODUCER)
        _end(span, outcome)
        row.wire_traceparent = None


# --- deliver and the webhook's attempts: the worker ---------------------------------------------


def deliver_start(*, parent: str | None, message_id: str, team: str | None, endpoint: str | None,
                  attempt: int, start_ns: int | None = None, span_id: str | None = None):
    """A copy's deliver span; ``span_id``: the id its handler task was already handed."""
    from opentelemetry.trace import SpanKind

    return _start(DELIVER, parent, {MESSAGE_ID: message_id, TEAM: team, ENDPOINT: endpoint, ATTEMPT_NO: attempt},
                  start_ns=start_ns, span_id=span_id, kind=SpanKind.CONSUMER)


def deliver_end(span, *, outcome: str, lateness_ms: int | None) -> None:
    _end(span, outcome, **{LATENESS_MS: lateness_ms})


def attempt_start(deliver_span, *, message_id: str, team: str | None, endpoint: str | None, attempt: int,
                  url: str):
    """A webhook call's span, a child of its delivery; its ``header_of`` goes out with the call."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    return _tracer.start_span(ATTEMPT, context=trace.set_span_in_context(deliver_span), kind=SpanKind.CLIENT,
                              attributes={k: v for k, v in {
                                  MESSAGE_ID: message_id, TEAM: team, ENDPOINT: endpoint, ATTEMPT_NO: attempt,
                                  "http.request.method": "POST", "url.full": url}.items() if v is not None})


def attempt_end(span, *, outcome: str, status_code: int | None, started_s: float, duration_ms: int) -> None:
    _end(span, outcome, end_ns=int((started_s * 1000 + duration_ms) * 1_000_000), **{STATUS_CODE: status_code})


# --- a Celery task out of the cascade, run by a worker of this project (celery/claim.py) ----------


def task_start(*, parent: str, message_id: str, task: str):
    """The deliver span of a Celery-queue task (a child of its publish span, ``parent``), made
    current in this thread from the claim on, so the task's body, its log lines and the user's own
    instrumentation join the trace. Returns what task_label and task_end take."""
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind

    span = _start(DELIVER, parent, {MESSAGE_ID: message_id, "messaging.system": "rabbitmq",
                                    "celery.task_name": task}, kind=SpanKind.CONSUMER)
    return span, context.attach(trace.set_span_in_context(span))


def task_label(started, *, team: str | None, endpoint: str | None, lateness_ms: int | None) -> None:
    """What the claim learnt of the task's message (its row)."""
    for key, value in ((TEAM, team), (ENDPOINT, endpoint), (LATENESS_MS, lateness_ms)):
        if value is not None:
            started[0].set_attribute(key, value)


def task_end(started, outcome: str) -> None:
    """End a task's span (task_start) once the task ran, or was skipped (``outcome``)."""
    from opentelemetry import context

    span, token = started
    try:
        context.detach(token)
    finally:
        _end(span, outcome)


# --- logs -----------------------------------------------------------------------------------------


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the span current in this thread, if any (the log lines')."""
    if not ENABLED:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return (f"{context.trace_id:032x}", f"{context.span_id:016x}") if context.is_valid else None


def use(span):
    """Make ``span`` current in a ``with`` block (its log lines carry its ids); it is not ended."""
    from opentelemetry import trace

    return trace.use_span(span, end_on_exit=False)

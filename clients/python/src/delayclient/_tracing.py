"""The W3C ``traceparent`` a scheduling call sends (the platform keeps it with the message and passes
it on to the webhook or the Celery task): the one given, else the current OpenTelemetry span's
when ``opentelemetry-api`` is installed (it is not a dependency of the client), else none."""

from __future__ import annotations


def current_traceparent() -> str | None:
    """The current span's traceparent, or None (no opentelemetry, or no valid span current)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def trace_headers(traceparent: str | None) -> dict | None:
    """The request's trace header: ``traceparent`` if given, else the current span's; None: none."""
    value = traceparent or current_traceparent()
    return {"traceparent": value} if value else None

"""The request and response headers the views share: a message's W3C ``traceparent``, taken from
the request, and ``Cache-Control: no-store`` on an answer that carries a key or a secret."""

from django.utils.cache import add_never_cache_headers
from drf_spectacular.utils import OpenApiParameter

# W3C Trace Context (docs/observability/tracing.md): the message continues the caller's trace. An
# invalid value is ignored, as W3C says (the message starts a trace of its own); never a 400.
TRACEPARENT_PARAMETER = OpenApiParameter(
    "traceparent", str, location=OpenApiParameter.HEADER, required=False,
    description="W3C traceparent (00-<trace id>-<parent id>-<flags>) the message continues; kept with it and "
                "sent on to its webhook or Celery task; ignored unless valid")


def traced(items: list[dict], request) -> list[dict]:
    """The request's traceparent on each item (the service keeps it only if it is valid)."""
    value = request.headers.get("traceparent")
    if value:
        for item in items:
            item["traceparent"] = value
    return items


def no_store(response):
    """An answer that carries a key or a secret: ``Cache-Control: no-store`` (and Django's other
    never-cache headers), so no cache -- a browser's, a proxy's -- keeps a copy."""
    add_never_cache_headers(response)
    return response


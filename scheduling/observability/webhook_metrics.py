"""The webhook engine's metrics (docs/observability/metrics.md): calls by outcome and their duration, circuits
opened and endpoints disabled. Labels are team and endpoint names (bounded by the endpoints)
and the outcome (a fixed set: models/delivery.py Outcome)."""

from __future__ import annotations

from django.db import DatabaseError, transaction
from prometheus_client import Counter, Histogram

from scheduling.observability import label_names

BY_ENDPOINT = ("team", "endpoint")
CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

WEBHOOK_CALLS = Counter(
    "delay_webhook_calls", "Webhook calls made, by outcome (ok, http_status, timeout, refused, dns, tls, too_large, "
    "guard, error).", (*BY_ENDPOINT, "outcome"))
WEBHOOK_CALL_SECONDS = Histogram(
    "delay_webhook_call_seconds", "How long each webhook call took, from its start to its answer read (or its "
    "failure).", BY_ENDPOINT, buckets=CALL_BUCKETS)
CIRCUITS_OPENED = Counter(
    "delay_webhook_circuits_opened", "Times an endpoint's circuit opened (its calls paused after consecutive "
    "failures).", BY_ENDPOINT)
ENDPOINTS_DISABLED = Counter(
    "delay_endpoints_disabled", "Endpoints the platform disabled for failing longer than its setting "
    "(docs/guides/webhooks.md).", BY_ENDPOINT)


class _Labels:
    def __init__(self, endpoint_id: int, topology_id: int | None):
        self.endpoint_id, self.topology_id = endpoint_id, topology_id


def _names(endpoint_id: int, topology_id: int | None = None) -> tuple[str, str]:
    try:
        label_names.learn_endpoints([endpoint_id])
    except DatabaseError:  # the ids stand in
        pass
    return label_names.of(_Labels(endpoint_id, topology_id))[:2]


def calls_on_commit(calls) -> None:
    """``calls``: (endpoint id, topology id, CallResult) of calls made, counted once committed."""
    calls = list(calls)
    if calls:
        transaction.on_commit(lambda: _count(calls), robust=True)


def _count(calls) -> None:
    for endpoint_id, topology_id, result in calls:
        team, endpoint = _names(endpoint_id, topology_id)
        WEBHOOK_CALLS.labels(team, endpoint, str(result.outcome)).inc()
        WEBHOOK_CALL_SECONDS.labels(team, endpoint).observe(result.duration_ms / 1000)


def circuit_opened(endpoint_id: int) -> None:
    transaction.on_commit(lambda: CIRCUITS_OPENED.labels(*_names(endpoint_id)).inc(), robust=True)


def endpoint_disabled(endpoint_id: int) -> None:
    transaction.on_commit(lambda: ENDPOINTS_DISABLED.labels(*_names(endpoint_id)).inc(), robust=True)

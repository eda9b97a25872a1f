"""When tracing is on: only when the standard OTEL_* variables ask for an exporter (the e2e test,
tests/e2e/test_tracing.py, follows a trace through a real platform)."""

import pytest

from scheduling.observability import tracing


@pytest.mark.parametrize(("endpoint", "traces_endpoint", "exporter", "on"), [
    ("", "", "", False),  # the default: off
    ("http://collector:4318", "", "", True),
    ("", "http://collector:4318/v1/traces", "", True),
    ("", "", "otlp", True),  # to localhost:4318
    ("http://collector:4318", "", "none", False),  # none wins
    ("", "http://collector:4318/v1/traces", "none", False),
])
def test_tracing_is_on_only_when_the_otel_variables_ask(endpoint, traces_endpoint, exporter, on):
    assert tracing.wanted(endpoint=endpoint, traces_endpoint=traces_endpoint, exporter=exporter) is on

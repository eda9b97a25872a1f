"""Fixtures of the observability tests."""

import pytest

from scheduling.probes import health


@pytest.fixture(autouse=True)
def fresh_health_answer():
    """Every test here starts and ends with no cached readiness answer (health.py keeps one for
    readyz_cache_seconds)."""
    health.forget()
    yield
    health.forget()

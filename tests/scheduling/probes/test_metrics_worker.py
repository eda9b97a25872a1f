"""Which processes set up a worker's multiprocess directory: a Celery worker only, and only
with a metrics port (the end-to-end tests run the real worker: tests/e2e/test_metrics.py)."""

import os

import pytest

from scheduling.observability import metrics_dir
from scheduling.probes import metrics_worker


@pytest.mark.parametrize("argv, worker", [
    (["/app/.venv/bin/celery", "-A", "delayplatform", "worker", "-l", "INFO"], True),
    (["/usr/lib/python3/site-packages/celery/__main__.py", "-A", "delayplatform", "worker"], True),
    (["/app/.venv/bin/celery", "-A", "delayplatform", "beat"], False),
    (["manage.py", "worker_health"], False),
    (["/app/.venv/bin/gunicorn", "delayplatform.wsgi"], False),
    (["/app/.venv/bin/pytest", "tests/e2e/test_worker.py", "worker"], False),
    ([], False),
])
def test_only_a_celery_worker_is_a_worker(argv, worker):
    assert metrics_worker.is_worker(argv) is worker


def test_a_worker_with_a_port_names_a_directory_of_its_own_and_one_without_none(settings, monkeypatch):
    """prometheus_client is imported in this test process already, with no directory: too late for
    it here, so the variable is set as it would be first thing in a worker."""
    monkeypatch.delitem(os.environ, metrics_dir.ENV, raising=False)
    monkeypatch.setattr(metrics_worker, "_state", {})
    argv = ["/app/.venv/bin/celery", "-A", "delayplatform", "worker"]
    settings.DELAY_WORKER_METRICS_PORT = 0
    metrics_worker.prepare(argv)
    assert metrics_dir.ENV not in os.environ
    monkeypatch.setenv(metrics_dir.ENV, "")  # present: prepare may set it (monkeypatch restores it)
    settings.DELAY_WORKER_METRICS_PORT = 9808
    metrics_worker.prepare(argv)
    made = metrics_worker._state["dir"]
    try:
        assert os.environ[metrics_dir.ENV] == made and metrics_worker._state["made"] is True
    finally:
        metrics_dir.remove(made)

"""A Celery worker's metrics: every worker serves them on DELAY_WORKER_METRICS_PORT (0: off),
counting both its main process (the delivery loop thread) and its prefork children (where
tasks out of the cascade are claimed), through prometheus_client's multiprocess mode.

The order matters. prometheus_client picks its mode when it is first imported, and a worker
sets Django up (which imports the platform's modules) before any Celery signal fires, so the
directory is set up when this module is imported: by the Celery app's module, in a process
started as ``celery ... worker``, before anything else. The server starts on ``worker_ready``,
once the pool has forked, so no child inherits it. A child that exits is marked dead (its live
gauges leave the sums).
"""

from __future__ import annotations

import logging
import os
import sys

from celery import signals

from scheduling.observability import metrics_dir

log = logging.getLogger(__name__)
_state: dict = {}  # "dir", "made", "server": this worker's


def is_worker(argv: list[str]) -> bool:
    """Whether this process was started as a Celery worker (``celery -A app worker``, ``python -m
    celery ... worker``)."""
    return bool(argv) and "celery" in argv[0] and "worker" in argv[1:]


def prepare(argv: list[str]) -> None:
    """Name this worker's directory in the environment before prometheus_client is imported
    (imported already without one, it is too late: _check_mode says so)."""
    if not is_worker(argv) or ("prometheus_client" in sys.modules and metrics_dir.ENV not in os.environ):
        return
    from django.core.exceptions import ImproperlyConfigured

    from scheduling.config.conf import conf

    try:
        port = conf().worker_metrics_port
    except ImproperlyConfigured:  # Django's start-up says so, in its own words, a moment later
        return
    if port:
        _state["dir"], _state["made"] = metrics_dir.set_up(prefix="dp-worker-metrics-")


prepare(sys.argv)


@signals.celeryd_init.connect
def _check_mode(sender=None, **kwargs) -> None:
    from prometheus_client import values

    from scheduling.config.conf import conf

    if conf().worker_metrics_port and not values.ValueClass._multiprocess:
        log.error("worker metrics: prometheus_client was imported before %s was set; the counts of the "
                  "prefork children will be missing (start the worker with `celery -A delayplatform worker`)",
                  metrics_dir.ENV)


@signals.worker_ready.connect
def _serve(sender=None, **kwargs) -> None:
    from scheduling.config.conf import conf, setting_name

    settings = conf()
    if not settings.worker_metrics_port or "server" in _state:
        return
    from scheduling.probes.metrics_http import serve

    try:
        _state["server"] = serve(settings.worker_metrics_addr, settings.worker_metrics_port)
    except OSError as exc:  # the port is taken (another worker on this host): deliver anyway
        log.error("worker metrics not served on %s:%s (%s); give each worker its own %s",
                  settings.worker_metrics_addr, settings.worker_metrics_port, exc, setting_name("worker_metrics_port"))
        return
    log.info("worker metrics on http://%s:%s/metrics (every process's counts in %s)", settings.worker_metrics_addr,
             settings.worker_metrics_port, os.environ.get(metrics_dir.ENV))


@signals.worker_process_shutdown.connect
def _child_exits(pid=None, **kwargs) -> None:
    if os.environ.get(metrics_dir.ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())


@signals.worker_shutdown.connect
def _stop(sender=None, **kwargs) -> None:
    server = _state.pop("server", None)
    if server is not None:
        server.shutdown()
        server.server_close()
    if _state.pop("made", False):
        metrics_dir.remove(_state.pop("dir"))

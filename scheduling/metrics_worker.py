"""A Celery worker's metrics: every worker serves them on DELAY_WORKER_METRICS_PORT (0: off),
counting both its main process (the delivery loop thread) and its prefork children (where
tasks out of the cascade are claimed), through prometheus_client's multiprocess mode.

The order matters: prometheus_client picks its mode when it is first imported, so the
directory is set up on ``celeryd_init``, before Django and the platform's modules load (this
module imports neither); the server starts on ``worker_ready``, once the pool has forked, so no
child inherits it. A child that exits is marked dead (its live gauges leave the sums).
"""

from __future__ import annotations

import logging
import os
import sys

from celery import signals

from . import metrics_dir

log = logging.getLogger(__name__)
_state: dict = {}  # "dir", "made", "server": this worker's


def _port() -> int:
    from .conf import conf

    return conf().worker_metrics_port


@signals.celeryd_init.connect
def _prepare_directory(sender=None, **kwargs) -> None:
    if not _port():
        return
    if "prometheus_client" in sys.modules and metrics_dir.ENV not in os.environ:
        log.error("prometheus_client was imported before the worker set up %s: the prefork children's "
                  "counts will be missing from the worker's metrics", metrics_dir.ENV)
    _state["dir"], _state["made"] = metrics_dir.set_up(prefix="dp-worker-metrics-")


@signals.worker_ready.connect
def _serve(sender=None, **kwargs) -> None:
    from .conf import conf

    settings = conf()
    if not settings.worker_metrics_port or "server" in _state:
        return
    from .metrics_http import serve

    try:
        _state["server"] = serve(settings.worker_metrics_addr, settings.worker_metrics_port)
    except OSError as exc:  # the port is taken (another worker on this host): deliver anyway
        log.error("worker metrics not served on %s:%s (%s); give each worker its own DELAY_WORKER_METRICS_PORT",
                  settings.worker_metrics_addr, settings.worker_metrics_port, exc)
        return
    log.info("worker metrics on http://%s:%s/metrics", settings.worker_metrics_addr, settings.worker_metrics_port)


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

"""Serving the metrics in the Prometheus text format: ``/metrics`` on the web server (a Django
view), and a small HTTP server in every Celery worker's main process (metrics_worker.py).

In a multi-process server (gunicorn's workers; a Celery worker's prefork children beside the
delivery loop's main process) each process counts into its own files under
PROMETHEUS_MULTIPROC_DIR and a scrape sums them all, whichever process answers it. The figures
from the database and the management API (metrics_figures.py) are the web server's only: one place reads them, and a worker's endpoint stays cheap.
"""

from __future__ import annotations

import os
import socket
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.http import HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    make_wsgi_app,
    multiprocess,
)
from prometheus_client.registry import Collector

from scheduling.config.conf import conf
from scheduling.observability import metrics_access
from scheduling.observability.metrics_dir import ENV
from scheduling.probes.metrics_figures import cached_figures


class _ThisProcess(Collector):
    """The process's own registry, when it is the only process counting."""

    def collect(self):
        return REGISTRY.collect()


def registry(*, figures: bool) -> CollectorRegistry:
    """What a scrape exports: every process's counts (or this process's), and the figures."""
    found = CollectorRegistry()
    if os.environ.get(ENV):
        multiprocess.MultiProcessCollector(found)
    else:
        found.register(_ThisProcess())
    if figures:
        found.register(cached_figures())
    return found


def _refusal(environ):
    """The refusal of a request, from its WSGI environ or Django's request.META (the same keys)."""
    settings = conf()
    return metrics_access.refusal(environ.get("REMOTE_ADDR"), environ.get("HTTP_AUTHORIZATION"),
                                  networks=settings.metrics_allowed_networks, token=settings.metrics_token,
                                  forwarded=metrics_access.is_forwarded(environ))


def _refused_headers(status) -> list[tuple[str, str]]:
    return [("Content-Type", "text/plain"), *([("WWW-Authenticate", "Bearer")] if status == 401 else [])]


def metrics_view(request):
    """``GET /metrics``: for Prometheus, on an allowed network (and with the token, if one is set;
    a forwarded request only with it)."""
    status = _refusal(request.META)
    if status is not None:
        return HttpResponse(f"{status.phrase}\n", status=status, headers=dict(_refused_headers(status)))
    return HttpResponse(generate_latest(registry(figures=True)), content_type=CONTENT_TYPE_LATEST)


# --- a worker's metrics server ------------------------------------------------------------------


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):  # a scrape every few seconds is not news
        pass


def _guarded(app):
    def guarded(environ, start_response):
        status = _refusal(environ)
        if status is not None:
            start_response(f"{status.value} {status.phrase}", _refused_headers(status))
            return [f"{status.phrase}\n".encode()]
        return app(environ, start_response)

    return guarded


def serve(addr: str, port: int) -> WSGIServer:
    """Serve this worker's metrics (every process of it) on ``addr:port`` in a daemon thread;
    OSError when the port is taken. ``server.shutdown()`` stops it."""
    family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("MetricsServer", (_Server,), {"address_family": family})
    server = make_server(addr, port, _guarded(make_wsgi_app(registry(figures=False))), server_class, _Quiet)
    threading.Thread(target=server.serve_forever, name="dp-metrics-server", daemon=True).start()
    return server

"""``/healthz`` (the process answers) and ``/readyz`` (its dependencies do, health.py) for load
balancers and orchestrators: no authentication, no secrets in the body.

They are answered by :class:`HealthCheckMiddleware`, placed first in MIDDLEWARE, before Django
validates the Host header or SecurityMiddleware redirects to HTTPS: a Kubernetes probe sends the
pod's IP as Host and speaks plain HTTP to the pod, and neither answer depends on the Host (no
URL is built from it). The same views are in urls.py for a project that leaves the middleware out.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_safe

from scheduling.probes.health import readiness

PATHS = ("/healthz", "/readyz")


def _answer(body: dict, status: int = 200) -> HttpResponse:
    response = JsonResponse(body, status=status)
    add_never_cache_headers(response)
    return response


@require_safe
def healthz(request: HttpRequest) -> HttpResponse:
    """The process is up and serving requests: no database, no broker."""
    return _answer({"status": "ok"})


@require_safe
def readyz(request: HttpRequest) -> HttpResponse:
    """200 when the database, the broker and the default cascade are ready, else 503 naming the
    part that is not (``failed``)."""
    result = readiness()
    return _answer(result.as_json(), 200 if result.ok else 503)


class HealthCheckMiddleware:
    """Answer the two probe paths (with or without a trailing slash) before any other middleware."""

    views = {"/healthz": healthz, "/readyz": readyz}

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = self.views.get(request.path_info.rstrip("/"))
        return view(request) if view is not None else self.get_response(request)

"""Who may read the metrics (``/metrics`` on the web server, each worker's metrics port): a client
on an allowed network, with ``Authorization: Bearer <DELAY_METRICS_TOKEN>`` when a token is set.
Metrics name every team's endpoints and show their traffic: not for the public internet.

A forwarded request (Forwarded, X-Forwarded-For, X-Real-IP, ... present) is refused unless a
token is set: behind a proxy on the same host every request comes from 127.0.0.1, so the peer's
address says nothing of the client the proxy speaks for. With a token, it is the token that
decides. Standard library only: the worker's metrics server and settings.py use it before
Django is set up."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from http import HTTPStatus

from scheduling.core.networks import Network

# The headers a proxy names its client in (as WSGI/Django name them): any of them makes a request forwarded.
FORWARDED_HEADERS = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP", "HTTP_X_FORWARDED_HOST",
                     "HTTP_X_CLIENT_IP", "HTTP_TRUE_CLIENT_IP", "HTTP_CF_CONNECTING_IP", "HTTP_X_ORIGINAL_FORWARDED_FOR")


def is_forwarded(environ: Mapping[str, object]) -> bool:
    """Whether a request (a WSGI environ or Django's request.META) came through a proxy."""
    return any(name in environ for name in FORWARDED_HEADERS)


def refusal(remote_addr: str | None, authorization: str | None, *, networks: tuple[Network, ...],
            token: str, forwarded: bool = False) -> HTTPStatus | None:
    """None when the request may read the metrics; otherwise the status to answer (403: not from
    an allowed network, or forwarded without a token set; 401: the bearer token is missing or
    wrong)."""
    try:
        address = ipaddress.ip_address((remote_addr or "").split("%")[0])
    except ValueError:
        return HTTPStatus.FORBIDDEN
    if getattr(address, "ipv4_mapped", None):
        address = address.ipv4_mapped
    if not any(address in network for network in networks):
        return HTTPStatus.FORBIDDEN
    if forwarded and not token:
        return HTTPStatus.FORBIDDEN
    if token:
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            return HTTPStatus.UNAUTHORIZED
    return None

"""Who may read the metrics (``/metrics`` on the web server, each worker's metrics port): a client
on an allowed network, with ``Authorization: Bearer <DELAY_METRICS_TOKEN>`` when a token is set.
Metrics name every endpoint and show the traffic: not for the public internet. Standard library
only: the worker's metrics server and settings.py use it before Django is set up."""

from __future__ import annotations

import hmac
import ipaddress
from http import HTTPStatus

from scheduling.core.networks import Network


def refusal(remote_addr: str | None, authorization: str | None, *, networks: tuple[Network, ...],
            token: str) -> HTTPStatus | None:
    """None when the request may read the metrics; otherwise the status to answer (403: not from
    an allowed network; 401: the bearer token is missing or wrong)."""
    try:
        address = ipaddress.ip_address((remote_addr or "").split("%")[0])
    except ValueError:
        return HTTPStatus.FORBIDDEN
    if getattr(address, "ipv4_mapped", None):
        address = address.ipv4_mapped
    if not any(address in network for network in networks):
        return HTTPStatus.FORBIDDEN
    if token:
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            return HTTPStatus.UNAUTHORIZED
    return None

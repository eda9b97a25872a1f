"""What an endpoint's handler may reach: the addresses of webhook targets (no loopback, private,
link-local, metadata, multicast or reserved address unless DELAY_WEBHOOK_ALLOWED_NETWORKS
allows it) and the names of Celery tasks (DELAY_CELERY_TASK_ALLOWLIST). Pure policy plus name
resolution; the services check a target when an endpoint is saved, and handlers.py checks the
address it connects to when a webhook is sent (DNS can change in between)."""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from scheduling.config.specs import variable
from scheduling.core.networks import Network

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT; Python counts it neither private nor global
NAT64 = ipaddress.ip_network("64:ff9b::/96")
OWN_TASKS = ("scheduling.*", "celery.*")  # the platform's and Celery's own tasks are never handlers


class TargetRefused(ValueError):
    """A handler target the guards refuse; the message says why and which setting allows it, and
    names no address but one written in the URL itself (it reaches API answers, attempts'
    last_error and logs a team reads)."""


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, NAT64): it is where a packet goes."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped:
        return address.ipv4_mapped
    if address.sixtofour:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _kind(address: Address) -> str | None:
    """Why an address is off limits ("loopback", ...), or None for a public address."""
    checks = (("unspecified", address.is_unspecified), ("loopback", address.is_loopback),
              ("link-local", address.is_link_local), ("multicast", address.is_multicast),
              ("shared (100.64.0.0/10)", address in SHARED), ("reserved", address.is_reserved),
              ("private", address.is_private), ("not globally routable", not address.is_global))
    return next((kind for kind, hit in checks if hit), None)


def address_refusal(address: str | Address, allowed: Iterable[Network] = ()) -> str | None:
    """Why this IP address may not be a webhook's peer, or None if it may."""
    ip = ipaddress.ip_address(str(address).split("%", 1)[0])  # an IPv6 scope id (fe80::1%eth0) is not part of it
    inner = _embedded_ipv4(ip)
    if any(candidate in network for candidate in (ip, inner) if candidate is not None
           for network in allowed if candidate.version == network.version):
        return None
    if inner is not None:  # the IPv4 address it carries is not named: the caller may not have written it
        kind = _kind(inner)
        return f"an IPv6 address carrying a {kind} IPv4 address" if kind else None
    kind = _kind(ip)
    return f"a {kind} address" if kind else None


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (all of them: a connection may use any), in the
    resolver's order. socket.gaierror when it resolves to nothing."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in found))  # an IP's: text already


def checked_addresses(host: str, port: int, allowed: Iterable[Network]) -> list[str]:
    """The addresses of ``host``, each allowed; TargetRefused if any is not (a name that also points
    inside must not be reachable by chance of the resolver's order)."""
    allowed = tuple(allowed)
    addresses = resolve(host, port)
    for address in addresses:
        why = address_refusal(address, allowed)
        if why:  # never the address a name resolved to: it is the inside of someone's network
            where = "is" if host == address else "resolves to"
            allowing = variable("webhook_allowed_networks")
            raise TargetRefused(f"webhook target {host} {where} {why}; allow its network in {allowing} to reach it")
    return addresses


def webhook_url_refusal(url: str, allowed: Iterable[Network]) -> str | None:
    """Why this URL may not be a webhook target, or None. A host that does not resolve now is
    accepted: it reaches nothing, and every send checks again."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError as exc:
        return f"is not a valid URL: {exc}"
    if parts.scheme.lower() not in ("http", "https"):
        return "must be an http(s) URL"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (user:password@): the URL is shown to everyone who can read the endpoint"
    if not parts.hostname:
        return "must name a host"
    try:
        checked_addresses(unquote(parts.hostname), port, allowed)  # an IPv6 zone: fe80::1%25eth0
    except TargetRefused as exc:
        return str(exc)
    except (socket.gaierror, UnicodeError):
        return None
    return None


def task_refusal(name: str, patterns: Iterable[str]) -> str | None:
    """Why a celery_task endpoint may not run this task, or None."""
    patterns = [p for p in patterns if p]
    if any(fnmatch.fnmatchcase(name, own) for own in OWN_TASKS):
        return f"task {name!r} is one of the platform's or Celery's own ({', '.join(OWN_TASKS)}) and never a handler"
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
        return None
    allowlist = variable("celery_task_allowlist")
    if not patterns:
        return (f"task {name!r} is not allowed: {allowlist} is empty, so no task may be a handler; "
                f"set it to patterns such as billing.tasks.*")
    return f"task {name!r} is not allowed: it matches none of {allowlist} ({', '.join(patterns)})"

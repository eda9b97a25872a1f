"""Reading broker URLs: which nodes, which vhost, where the management API is, how to show one
to a user. A cluster is written as kombu's failover form, ``amqp://a;amqp://b;amqp://c``."""

from __future__ import annotations

import zlib
from urllib.parse import quote, urlsplit, urlunsplit

from kombu import Connection


def node_urls(url: str) -> list[str]:
    """The nodes of a (failover) URL, in the order given: ``amqp://a;amqp://b`` -> both."""
    nodes = [part.strip() for part in url.split(";") if part.strip()]
    if not nodes:
        raise ValueError("the broker URL is empty")
    return nodes


def rotated(nodes: list[str], first: int) -> list[str]:
    """The nodes starting from ``first`` (modulo their number), then the others in order."""
    start = first % len(nodes)
    return nodes[start:] + nodes[:start]


def node_for(name: str, nodes: int) -> int:
    """A stable node index for a queue name (the same in every process)."""
    return zlib.crc32(name.encode()) % nodes


def vhost_of(broker_url: str) -> str:
    """The vhost an AMQP URL names: '' and '/' both mean the default vhost '/'. Every node of a
    failover URL must name the same vhost."""
    vhosts = {_vhost(node) for node in node_urls(broker_url)}
    if len(vhosts) > 1:
        raise ValueError(f"the nodes of the broker URL name different vhosts: {', '.join(sorted(vhosts))}")
    return vhosts.pop()


def _vhost(url: str) -> str:
    path = urlsplit(url).path
    return "/" if path in ("", "/") else path[1:].replace("%2F", "/").replace("%2f", "/")


def management_url_for(broker_url: str, port: int = 15672) -> str:
    """The usual management address of each node of an AMQP URL (same host and credentials)."""
    urls = []
    for node in node_urls(broker_url):
        parts = urlsplit(node)
        user, password = parts.username or "guest", parts.password or "guest"
        urls.append(f"http://{user}:{password}@{parts.hostname or '127.0.0.1'}:{port}")
    return ";".join(urls)


def with_credentials(broker_url: str, user: str, password: str) -> str:
    """The same nodes and vhost, logged in as ``user`` (what a team's workers connect with)."""
    urls = []
    for node in node_urls(broker_url):
        parts = urlsplit(node)
        host = parts.hostname or "127.0.0.1"
        host = f"[{host}]" if ":" in host else host  # an IPv6 address
        netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}" + (f":{parts.port}" if parts.port else "")
        urls.append(urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)))
    return ";".join(urls)


def describe(broker_url: str) -> str:
    """The URL without its passwords, for messages to users."""
    return ";".join(Connection(node).as_uri(include_password=False) for node in node_urls(broker_url))

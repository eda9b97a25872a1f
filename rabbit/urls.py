"""Reading broker URLs: which vhost, where the management API is, how to show one to a user."""

from __future__ import annotations

from urllib.parse import urlsplit

from kombu import Connection


def vhost_of(broker_url: str) -> str:
    """The vhost an AMQP URL names: '' and '/' both mean the default vhost '/'."""
    path = urlsplit(broker_url).path
    return "/" if path in ("", "/") else path[1:].replace("%2F", "/").replace("%2f", "/")


def management_url_for(broker_url: str, port: int = 15672) -> str:
    """The usual management address of an AMQP broker URL (same host and credentials)."""
    parts = urlsplit(broker_url)
    user, password = parts.username or "guest", parts.password or "guest"
    return f"http://{user}:{password}@{parts.hostname or '127.0.0.1'}:{port}"


def describe(broker_url: str) -> str:
    """The URL without its password, for messages to users."""
    return Connection(broker_url).as_uri(include_password=False)

"""A cheap, bounded look at the broker for readiness checks: can we connect to the vhost, and do
these exchanges and queues exist? Passive declares on one channel (a few hundred microseconds
each), never the management API, so a load balancer polling every second costs the broker little."""

from __future__ import annotations

from amqp.exceptions import NotFound

from .connection import CONNECTION_ERRORS, close_channel, open_connection, reason, release
from .errors import BrokerUnavailable


def missing(conn, *, exchanges=(), queues=(), limit: int = 3) -> list[str]:
    """Names among ``exchanges`` and ``queues`` that do not exist, up to ``limit`` of them. A
    passive declare of a missing name closes its channel, so a miss costs a new channel."""
    wanted = [("exchange", name) for name in exchanges] + [("queue", name) for name in queues]
    found_missing: list[str] = []
    channel = conn.channel()
    try:
        for kind, name in wanted:
            try:
                if kind == "exchange":
                    channel.exchange_declare(name, "topic", passive=True)
                else:
                    channel.queue_declare(name, passive=True)
            except NotFound:
                found_missing.append(name)
                if len(found_missing) >= limit:
                    break
                close_channel(channel)
                channel = conn.channel()
    finally:
        close_channel(channel)
    return found_missing


def probe(url: str, *, exchanges=(), queues=(), timeout: float = 2.0) -> list[str]:
    """Connect to the broker (``timeout`` bounds the connect and each read) and return the missing
    names among those given ([] when all exist). BrokerUnavailable when the vhost cannot be had."""
    conn = open_connection(url, role="probe", timeout=timeout)
    try:
        return missing(conn, exchanges=exchanges, queues=queues)
    except CONNECTION_ERRORS as exc:
        raise BrokerUnavailable(f"broker connection lost: {reason(exc)}") from None
    finally:
        release(conn)

"""Connections that fail fast, and channels whose broker errors become :mod:`rabbit.errors`."""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager

from amqp.exceptions import AMQPError, NotFound, PreconditionFailed
from kombu import Connection
from kombu.exceptions import OperationalError

from .errors import BrokerUnavailable, TopologyConflict, TopologyMissing
from .framing import buffering_frame_writer
from .urls import describe, node_urls, rotated

# What a broken or refused connection raises, from the socket up through amqp and kombu.
CONNECTION_ERRORS = (OSError, AMQPError, OperationalError)


def reason(exc: BaseException) -> str:
    """The broker's own words (``reply_text``) without the AMQP code prefix, else the text."""
    text = getattr(exc, "reply_text", None) or str(exc) or type(exc).__name__
    return text.split(" - ", 1)[-1] if text.startswith(("PRECONDITION_FAILED", "NOT_FOUND")) else text


def connection_name(role: str) -> str:
    """What the management UI shows for a connection: role, host and process."""
    return f"delay-platform {role} {socket.gethostname()} pid {os.getpid()}"


# how long a connection may take to open when its caller names no bound (DELAY_BROKER_CONNECT_TIMEOUT_MS
# gives the platform's: scheduling/config/conf.py broker())
CONNECT_TIMEOUT_S = 5.0


def open_connection(url: str, first: int = 0, role: str = "session", timeout: float | None = None,
                    connect_timeout: float | None = None) -> Connection:
    """A connected kombu connection (``connect_timeout``, 5 s unless given, to connect; no retries), or BrokerUnavailable. A
    failover URL (``amqp://a;amqp://b``) is tried node by node, from node ``first`` on, so a
    dead node costs one refused connection. The connection is named after ``role`` (see
    :func:`connection_name`), so an operator can tell which node each part is on. Its publishes can be batched into one socket write
    (rabbit.framing). ``timeout``: its connect and every socket read and write bounded by it (a
    probe must answer in bounded time, even from a broker that accepts TCP and then hangs)."""
    connect_s = timeout or connect_timeout or CONNECT_TIMEOUT_S
    failures = []
    for node in rotated(node_urls(url), first):
        bounded = {} if timeout is None else {"read_timeout": timeout, "write_timeout": timeout}
        conn = Connection(node, connect_timeout=connect_s,
                          transport_options={"max_retries": 0, "frame_writer": buffering_frame_writer,
                                             "client_properties": {"connection_name": connection_name(role)},
                                             **bounded})
        try:
            # one attempt per node: kombu's connect() tries a refused node again after 2 s, which
            # a dead cluster node would add to every reconnect (the delivery loop's, the relay's)
            conn.ensure_connection(max_retries=0, reraise_as_library_errors=False)
        except CONNECTION_ERRORS as exc:
            conn.release()
            failures.append(f"{describe(node)}: {reason(exc)}")
            continue
        return conn
    raise BrokerUnavailable(f"cannot connect to RabbitMQ at {'; '.join(failures)}")


def release(conn: Connection | None) -> None:
    """Close a connection that may already be broken."""
    if conn is not None:
        try:
            conn.release()
        except Exception:  # a broken connection cannot be closed cleanly; nothing is lost
            pass


@contextmanager
def channel_of(conn: Connection):
    """A fresh channel per operation: a broker error closes the channel it happened on."""
    channel = conn.channel()
    try:
        yield channel
    except PreconditionFailed as exc:
        raise TopologyConflict(reason(exc)) from None
    except NotFound as exc:
        raise TopologyMissing(reason(exc)) from None
    finally:
        close_channel(channel)


def close_channel(channel) -> None:
    try:
        channel.close()
    except Exception:  # the broker already closed it after an error
        pass

"""Connections that fail fast, and channels whose broker errors become :mod:`rabbit.errors`."""

from __future__ import annotations

from contextlib import contextmanager

from amqp.exceptions import AMQPError, NotFound, PreconditionFailed
from kombu import Connection
from kombu.exceptions import OperationalError

from .errors import BrokerUnavailable, TopologyConflict, TopologyMissing
from .framing import buffering_frame_writer
from .urls import describe

# What a broken or refused connection raises, from the socket up through amqp and kombu.
CONNECTION_ERRORS = (OSError, AMQPError, OperationalError)


def reason(exc: BaseException) -> str:
    """The broker's own words (``reply_text``) without the AMQP code prefix, else the text."""
    text = getattr(exc, "reply_text", None) or str(exc) or type(exc).__name__
    return text.split(" - ", 1)[-1] if text.startswith(("PRECONDITION_FAILED", "NOT_FOUND")) else text


def open_connection(url: str) -> Connection:
    """A connected kombu connection (5 s to connect, no retries), or BrokerUnavailable. Its
    publishes can be batched into one socket write (rabbit.framing)."""
    conn = Connection(url, connect_timeout=5,
                      transport_options={"max_retries": 0, "frame_writer": buffering_frame_writer})
    try:
        conn.connect()
    except CONNECTION_ERRORS as exc:
        conn.release()
        raise BrokerUnavailable(f"cannot connect to RabbitMQ at {describe(url)}: {reason(exc)}") from None
    return conn


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

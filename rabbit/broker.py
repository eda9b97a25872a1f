"""The small interface the platform talks to: one broker (AMQP URL + management API).

    broker = Broker(url)
    with broker.session() as session:       # one connection for a unit of work
        session.declare(plan)
        outcome = session.publish(messages)
    broker.publish(messages)                 # the relay: a long-lived connection per thread
    broker.management.queue_depths(broker.vhost)
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from functools import cached_property

from topology import cascade

from . import declare
from .connection import channel_of, open_connection, release
from .errors import BrokerUnavailable
from .management import Management
from .publish import DEFAULT_WINDOW, Outcome, Outgoing, publish_confirmed
from .reader import QueueReader
from .urls import describe, management_url_for, vhost_of


class Session:
    """One open connection. Every method is one broker operation on a fresh channel, except
    :meth:`reader`, whose channel lives as long as the reader (unacked messages return when it
    closes)."""

    def __init__(self, conn):
        self.conn = conn

    def declare(self, plan: cascade.Plan) -> list[str]:
        """Returns a line per exchange kept as another system had declared it."""
        return declare.declare_plan(self.conn, plan)

    def teardown(self, plan: cascade.Plan) -> None:
        declare.teardown_plan(self.conn, plan)

    def declare_queue(self, queue: cascade.Queue) -> None:
        declare.declare_queue(self.conn, queue)

    def bind(self, binding: cascade.Binding) -> None:
        declare.bind(self.conn, binding)

    def unbind(self, binding: cascade.Binding) -> None:
        declare.unbind(self.conn, binding)

    def queue_depth(self, name: str) -> int | None:
        return declare.queue_depth(self.conn, name)

    def delete_queue(self, name: str) -> None:
        declare.delete_queue(self.conn, name)

    def purge_queue(self, name: str) -> int:
        return declare.purge_queue(self.conn, name)

    def publish(self, messages: list[Outgoing], *, window: int = DEFAULT_WINDOW) -> Outcome:
        return publish_confirmed(self.conn, messages, window=window)

    @contextmanager
    def reader(self, queue: str):
        with channel_of(self.conn) as channel:
            yield QueueReader(channel, queue)


class Broker:
    def __init__(self, url: str, management_url: str = ""):
        self.url = url
        self.management_url = management_url or management_url_for(url)
        self._local = threading.local()  # the publishing connection of each thread

    @property
    def vhost(self) -> str:
        return vhost_of(self.url)

    def describe(self) -> str:
        return describe(self.url)

    @cached_property
    def management(self) -> Management:
        return Management(self.management_url)

    @contextmanager
    def session(self):
        """A connection for one unit of work (BrokerUnavailable if it cannot be had)."""
        conn = open_connection(self.url)
        try:
            yield Session(conn)
        finally:
            release(conn)

    def publish(self, messages: list[Outgoing], *, window: int = DEFAULT_WINDOW) -> Outcome:
        """Confirmed publish on this thread's long-lived connection (opened on first use and
        again after a failure). Raises BrokerUnavailable when no connection can be had; a
        connection that breaks mid-batch is an Outcome with ``error`` set."""
        conn = getattr(self._local, "conn", None)
        if conn is None or not conn.connected:
            self.close_publisher()
            conn = self._local.conn = open_connection(self.url)
        outcome = publish_confirmed(conn, messages, window=window)
        if outcome.error:
            self.close_publisher()
        return outcome

    def close_publisher(self) -> None:
        release(getattr(self._local, "conn", None))
        self._local.conn = None


__all__ = ["Broker", "BrokerUnavailable", "Session"]

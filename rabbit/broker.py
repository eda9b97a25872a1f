"""The small interface the platform talks to: one broker (AMQP URL + management API).

    broker = Broker(url)
    with broker.session() as session:       # one connection for a unit of work
        session.declare(plan)
        outcome = session.publish(messages)
    broker.publish(messages)                 # the relay: a connection and channel kept per thread
    broker.management.queue_depths(broker.vhost)

On a cluster (a failover URL listing the nodes) every connection fails over to a live node, and
a session declares each new quorum queue through a connection to a chosen node: a quorum queue's
leader is placed on the node its declaring client is connected to, so a plan's level queues and
the endpoint queues get their leaders spread over the nodes.
"""

from __future__ import annotations

import os
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property

from topology import cascade

from . import declare
from .connection import CONNECTION_ERRORS, channel_of, open_connection, reason, release
from .errors import BrokerUnavailable
from .management import Management
from .probe import probe
from .publish import DEFAULT_WINDOW, ConfirmChannel, Outcome, Outgoing, publish_confirmed
from .reader import QueueReader
from .urls import describe, management_url_for, node_for, node_urls, vhost_of


class Session:
    """One open connection. Every method is one broker operation on a fresh channel, except
    :meth:`reader`, whose channel lives as long as the reader (unacked messages return when it
    closes)."""

    def __init__(self, conn, url: str | None = None, connect_timeout: float | None = None):
        self.conn = conn
        self.connect_timeout = connect_timeout
        self.url = url  # set when the broker has several nodes: queues are placed over them
        self._placing: dict[int, object] = {}  # node index -> connection opened to place queues

    def _conn_for(self, node: int):
        """A connection whose first choice is node ``node`` (leader placement), else the session's."""
        if self.url is None:
            return self.conn
        node %= len(node_urls(self.url))
        if node not in self._placing:
            self._placing[node] = open_connection(self.url, first=node, connect_timeout=self.connect_timeout)
        return self._placing[node]

    def close(self) -> None:
        for conn in self._placing.values():
            release(conn)
        self._placing.clear()

    @property
    def server_version(self) -> str:
        """The RabbitMQ version the connected node reports (AMQP connection.start), e.g. "4.0.5"."""
        version = (self.conn.connection.server_properties or {}).get("version", "")
        return version.decode() if isinstance(version, bytes) else str(version)

    def declare(self, plan: cascade.Plan, first_node: int = 0) -> list[str]:
        """Returns a line per exchange kept as another system had declared it. Queue i of the
        plan is declared through node ``first_node + i`` (modulo the nodes), which spreads the
        levels' leaders (a shard passes its number, so shards' same levels differ too)."""
        return declare.declare_plan(self.conn, plan, queue_conn=lambda i: self._conn_for(first_node + i))

    def teardown(self, plan: cascade.Plan) -> None:
        declare.teardown_plan(self.conn, plan)

    def declare_queue(self, queue: cascade.Queue) -> None:
        """Through the node its name hashes to, on a cluster (its leader lands there)."""
        node = node_for(queue.name, len(node_urls(self.url))) if self.url else 0
        declare.declare_queue(self._conn_for(node), queue)

    def declare_task_queue(self, queue) -> None:
        """A Celery task queue (a kombu Queue from Celery's router), with its exchange and binding."""
        declare.declare_task_queue(self.conn, queue)

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


@dataclass
class PublisherStats:
    """What this process's publishers opened (Broker.publish): a connection and a channel each,
    then again only after a failure."""

    connections: int = 0
    channels: int = 0
    batches: int = 0


class _Publisher:
    """One thread's publishing connection and its confirm channel, and the process that opened
    them: a forked child (gunicorn's workers, Celery's pool) finds another pid and opens its own,
    leaving the parent's alone (closing it would send connection.close on the parent's socket)."""

    def __init__(self, conn):
        self.pid, self.thread = os.getpid(), threading.current_thread().name
        self.conn = conn
        self.confirm: ConfirmChannel | None = None


class Broker:
    def __init__(self, url: str, management_url: str = "", connect_timeout: float | None = None):
        self.url = url
        self.connect_timeout = connect_timeout  # seconds; None: rabbit.connection's default
        self.management_url = management_url or management_url_for(url)
        self._local = threading.local()  # the publishing connection and channel of each thread
        self.stats = PublisherStats()  # counted without a lock (a lock held at a fork would hang the child)
        self._publishers: weakref.WeakSet[_Publisher] = weakref.WeakSet()

    @property
    def vhost(self) -> str:
        return vhost_of(self.url)

    def describe(self) -> str:
        return describe(self.url)

    @cached_property
    def management(self) -> Management:
        return Management(self.management_url)

    @property
    def nodes(self) -> list[str]:
        return node_urls(self.url)

    @contextmanager
    def session(self):
        """A connection for one unit of work (BrokerUnavailable if it cannot be had)."""
        conn = open_connection(self.url, connect_timeout=self.connect_timeout)
        session = Session(conn, self.url if len(self.nodes) > 1 else None, self.connect_timeout)
        try:
            yield session
        finally:
            session.close()
            release(conn)

    def probe(self, *, exchanges=(), queues=(), timeout: float = 2.0) -> list[str]:
        """Readiness: a fresh connection bounded by ``timeout``; the missing names among those
        given (BrokerUnavailable when the vhost cannot be reached)."""
        return probe(self.url, exchanges=exchanges, queues=queues, timeout=timeout)

    def _count(self, **counts: int) -> None:
        for name, n in counts.items():
            setattr(self.stats, name, getattr(self.stats, name) + n)

    def _publisher(self) -> _Publisher:
        """This thread's publisher, opened on first use, after a failure, and in a forked child."""
        publisher = getattr(self._local, "publisher", None)
        if publisher is not None and publisher.pid != os.getpid():
            publisher = self._local.publisher = None  # the parent's: dropped, not closed
        if publisher is None or not publisher.conn.connected:
            self.close_publisher()
            publisher = self._local.publisher = _Publisher(open_connection(self.url, role="publisher",
                                                                        connect_timeout=self.connect_timeout))
            self._publishers.add(publisher)
            self._count(connections=1)
        if publisher.confirm is None or not publisher.confirm.usable:
            if publisher.confirm is not None:
                publisher.confirm.close()
            publisher.confirm = None
            publisher.confirm = ConfirmChannel(publisher.conn)
            self._count(channels=1)
        return publisher

    def publisher_connections(self) -> dict[str, object]:
        """The open publishing connections of this process by the name of the thread that publishes
        on each (the web's relay: ``dp-relay-<pid>``; tests break their sockets)."""
        return {p.thread: p.conn for p in list(self._publishers) if p.pid == os.getpid() and p.conn.connected}

    def publish(self, messages: list[Outgoing], *, window: int = DEFAULT_WINDOW, timeout: float = 30.0) -> Outcome:
        """Confirmed publish on this thread's long-lived connection and confirm channel (opened on
        first use, and again after a failure or in a forked child). Raises BrokerUnavailable when no
        connection can be had; a connection or channel that breaks mid-batch, or confirms not all in
        by ``timeout`` seconds, is an Outcome with ``error`` set (both are then replaced)."""
        if not messages:
            return Outcome()
        try:
            publisher = self._publisher()  # BrokerUnavailable when no node can be reached
        except CONNECTION_ERRORS as exc:  # connected, but the channel could not be opened
            self.close_publisher()
            return Outcome(failed={i: f"not confirmed: {reason(exc)}" for i in range(len(messages))},
                           error=reason(exc))
        outcome = publisher.confirm.publish(messages, window=window, timeout=timeout)
        self._count(batches=1)
        if outcome.error:
            self.close_publisher()
        return outcome

    def close_publisher(self) -> None:
        """Close this thread's publishing connection (a forked child's inherited one is dropped)."""
        publisher = getattr(self._local, "publisher", None)
        self._local.publisher = None
        if publisher is not None and publisher.pid == os.getpid():
            if publisher.confirm is not None:
                publisher.confirm.close()
            release(publisher.conn)


__all__ = ["Broker", "BrokerUnavailable", "Session"]

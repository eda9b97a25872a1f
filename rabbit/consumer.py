"""A long-lived consuming connection: the delivery loop's one door to the broker.

Subscribes queues with a shared prefetch window, hands each message over as a
:class:`~rabbit.received.Received`, acks or rejects by tag, and publishes retries on the same
connection. Any broken connection surfaces as :class:`~rabbit.errors.BrokerUnavailable`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from functools import wraps

from .acks import Unsettled
from .connection import CONNECTION_ERRORS, open_connection, reason, release
from .declare import queue_depth
from .errors import BrokerUnavailable
from .framing import batched_writes
from .publish import Outcome, Outgoing, publish_confirmed
from .received import Received, received


def _connection_errors(method):
    @wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except CONNECTION_ERRORS as exc:
            raise BrokerUnavailable(f"broker connection lost: {reason(exc)}") from None

    return wrapper


class Consumer:
    def __init__(self, url: str, *, prefetch: int, on_message: Callable[[Received], None],
                 on_cancel: Callable[[str], None], connect_timeout: float | None = None):
        self.url, self.prefetch, self.connect_timeout = url, prefetch, connect_timeout
        self.on_message, self.on_cancel = on_message, on_cancel
        self.tags: dict[str, str] = {}  # queue -> consumer tag
        self.conn = self.channel = None
        self.unsettled = Unsettled()

    @contextmanager
    def connected(self):
        self.conn = open_connection(self.url, role="delivery-loop", connect_timeout=self.connect_timeout)
        try:
            self._open_channel()
            yield self
        finally:
            self.tags.clear()
            release(self.conn)
            self.conn = self.channel = None

    @_connection_errors
    def _open_channel(self) -> None:
        self.unsettled = Unsettled()  # delivery tags belong to a channel
        self.channel = self.conn.channel()
        self.channel.basic_qos(0, self.prefetch, False)

    @property
    def queues(self) -> set[str]:
        return set(self.tags)

    @_connection_errors
    def consume(self, queue: str) -> None:
        def deliver(message, queue=queue):
            self.unsettled.add(message.delivery_tag)
            self.on_message(received(message, queue))

        self.tags[queue] = self.channel.basic_consume(queue, callback=deliver, on_cancel=self._cancelled)

    @_connection_errors
    def cancel(self, queue: str) -> None:
        self.channel.basic_cancel(self.tags.pop(queue))

    def _cancelled(self, consumer_tag: str) -> None:
        """The broker cancelled a consumer (its queue was deleted)."""
        for queue, tag in list(self.tags.items()):
            if tag == consumer_tag:
                del self.tags[queue]
                self.on_cancel(queue)

    @_connection_errors
    def queue_exists(self, queue: str) -> bool:
        return queue_depth(self.conn, queue) is not None

    @_connection_errors
    def queue_ready(self, queue: str) -> int | None:
        """Messages ready in a queue (not counting those consumers hold), None if it does not exist."""
        return queue_depth(self.conn, queue)

    @_connection_errors
    def wait(self, timeout: float, then_take: int = 0) -> None:
        """Wait up to ``timeout`` for the next message, then take up to ``then_take`` more that
        are already on the socket: drain_events returns after one message, and handling them one
        by one made every batch a batch of one."""
        try:
            self.conn.drain_events(timeout=timeout)
            for _ in range(then_take):
                self.conn.drain_events(timeout=0.0001)
        except TimeoutError:  # socket.timeout is its alias since Python 3.10
            pass

    @_connection_errors
    def ack(self, message: Received) -> None:
        self.ack_many([message])

    @_connection_errors
    def ack_many(self, messages: list[Received]) -> None:
        """Ack a batch in as few frames as ``multiple`` allows (rabbit/acks.py), one write."""
        if not messages:
            return
        multiple, singles = self.unsettled.plan_acks([m.tag for m in messages])
        with batched_writes(self.conn):
            if multiple is not None:
                self.channel.basic_ack(multiple, multiple=True)
            for tag in singles:
                self.channel.basic_ack(tag)

    @_connection_errors
    def reject(self, message: Received, requeue: bool = True) -> None:
        self.unsettled.settle(message.tag)
        self.channel.basic_reject(message.tag, requeue=requeue)

    def publish(self, messages: list[Outgoing], *, timeout: float = 30.0) -> Outcome:
        return publish_confirmed(self.conn, messages, timeout=timeout)

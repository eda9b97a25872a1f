"""The delivery loop's broker session: the connection it consumes on, one at a time, numbered so
that a copy is acked only on the connection it came on (a copy of an earlier one comes back on the
next, unacked), and when it was made (the rescue spares the queues of a young one).

Apart from the loop because every part that acks, rejects or publishes reaches the broker through
the session's consumer of the moment: the one object they share, replaced at each reconnect."""

from __future__ import annotations

import logging
from collections.abc import Callable

import rabbit
from scheduling.config.conf import DelaySettings, broker

log = logging.getLogger(__name__)


class Session:
    def __init__(self, settings: DelaySettings):
        self.settings = settings
        self.consumer: rabbit.Consumer | None = None
        self.number = 0  # which broker connection a held message came on (acks go to that one only)
        self.started = float("-inf")  # when the connection was made (the rescue spares a young one's queues)

    def open(self, on_message: Callable[[rabbit.Received], None]) -> rabbit.Consumer:
        """The next connection's consumer (connected by the caller: ``with consumer.connected()``)."""
        self.number += 1
        self.consumer = rabbit.Consumer(broker().url, prefetch=self.settings.delivery_prefetch,
                                        on_message=on_message, on_cancel=self._on_cancel,
                                        connect_timeout=broker().connect_timeout)
        return self.consumer

    @staticmethod
    def _on_cancel(name: str) -> None:
        log.warning("the broker cancelled consuming %s (queue deleted?)", name)

"""Reading a queue with ``basic_get`` until it is empty or a batch is full (the migration tools
and the unroutable drain). Everything read and not acked goes back when the reader closes."""

from __future__ import annotations

from .received import Received, received


class QueueReader:
    def __init__(self, channel, queue: str):
        self.channel, self.queue = channel, queue

    def get(self, limit: int) -> list[Received]:
        """Up to ``limit`` messages, unacked; fewer means the queue is empty now."""
        batch = []
        for _ in range(limit):
            message = self.channel.basic_get(self.queue, no_ack=False)
            if message is None:
                break
            batch.append(received(message, self.queue))
        return batch

    def ack(self, message: Received) -> None:
        self.channel.basic_ack(message.tag)

    def reject(self, message: Received, requeue: bool = True) -> None:
        self.channel.basic_reject(message.tag, requeue=requeue)

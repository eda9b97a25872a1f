"""Publishing (and acking) a batch with one socket write instead of one per message.

py-amqp writes every frame to the socket as soon as it is built: a confirmed batch of 20,000
messages would be 20,000 ``send`` calls and as many wake-ups of the broker. py-amqp takes the
frame writer as a constructor argument (``amqp.Connection(frame_writer=…)``, which kombu passes
through from ``transport_options``): this one wraps py-amqp's own and, only inside
:func:`batched_writes`, holds ``basic.publish``, ``basic.ack``, ``basic.reject`` and
``basic.nack`` frames until the caller flushes (before it waits for the broker) or the batch
ends. Any other frame flushes what is held first, so order is kept; outside a batch it writes
through. Measured on 20,000 confirmed publishes: the publisher's CPU per message -30 %, the
broker's -25 % (docs/operations/performance.md).
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager

from amqp.method_framing import frame_writer as amqp_frame_writer

HELD = frozenset({(60, 40), (60, 80), (60, 90), (60, 120)})  # basic.publish, .ack, .reject, .nack
_batchers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Batcher:
    def __init__(self, write):
        self.write = write  # the socket's
        self.held: list[bytes] = []
        self.batching = 0  # nested batches: held until the outermost ends
        self.holding = False

    def sink(self, data) -> None:
        if self.holding:
            self.held.append(bytes(data))  # py-amqp reuses its buffer: copy
        else:
            self.write(data)

    def flush(self) -> None:
        if self.held:
            data, self.held = b"".join(self.held), []
            self.write(data)


def buffering_frame_writer(connection, transport):
    """A frame writer for ``amqp.Connection`` (see the module docstring)."""
    batcher = _Batcher(transport.write)

    class _Sink:
        write = staticmethod(batcher.sink)

    inner = amqp_frame_writer(connection, _Sink)

    def write_frame(type_, channel, method_sig, args, content):
        if batcher.batching and method_sig in HELD:
            batcher.holding = True
            try:
                return inner(type_, channel, method_sig, args, content)
            finally:
                batcher.holding = False
        batcher.flush()
        return inner(type_, channel, method_sig, args, content)

    _batchers[connection] = batcher
    return write_frame


@contextmanager
def batched_writes(conn):
    """``with batched_writes(kombu_connection) as flush:`` publishes are held until ``flush()``
    (call it before waiting for the broker) or the end of the block. A connection opened
    without :func:`buffering_frame_writer` writes through, and ``flush`` does nothing."""
    batcher = _batchers.get(getattr(conn, "connection", conn))
    if batcher is None:
        yield lambda: None
        return
    batcher.batching += 1
    try:
        yield batcher.flush
    finally:
        batcher.batching -= 1
        if not batcher.batching:
            batcher.flush()

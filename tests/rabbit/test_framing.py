"""Batched socket writes (rabbit/framing.py) against the real broker, and the py-amqp and kombu
interfaces they rely on: a contract test that fails on an upgrade that changes them."""

import inspect
import uuid

import amqp
import pytest
from kombu import Producer
from kombu.transport import pyamqp

import rabbit
from rabbit import framing
from rabbit.publish import publish_confirmed

pytestmark = pytest.mark.broker


def test_py_amqp_and_kombu_still_take_a_frame_writer():
    """py-amqp's Connection takes ``frame_writer`` and calls it with (connection, transport);
    kombu passes transport_options to it. If either changes, batching silently stops."""
    assert "frame_writer" in inspect.signature(amqp.Connection.__init__).parameters
    assert list(inspect.signature(framing.amqp_frame_writer).parameters)[:2] == ["connection", "transport"]
    assert "transport_options" in inspect.getsource(pyamqp.Transport.establish_connection)


def test_a_confirmed_batch_goes_out_in_few_writes_in_order(amqp, queue):
    batcher = framing._batchers[amqp.conn.connection]
    writes, real = [], batcher.write
    batcher.write = lambda data: (writes.append(len(data)), real(data))
    try:
        messages = [rabbit.Outgoing("", queue, b"%d" % i, {"n": i}, {"message_id": uuid.uuid4().hex})
                    for i in range(1000)]
        outcome = publish_confirmed(amqp.conn, messages, window=128)
    finally:
        batcher.write = real
    assert outcome.confirmed == set(range(1000)) and outcome.error is None
    assert len(writes) < 100, f"{len(writes)} socket writes for 1,000 publishes"
    with amqp.reader(queue) as reader:
        got = reader.get(2000)
        for message in got:
            reader.ack(message)
    assert [m.headers["n"] for m in got] == list(range(1000))


def test_outside_a_batch_a_publish_is_written_at_once(amqp, queue):
    """Anyone else's publish on the same connection (a kombu Producer) is not held back."""
    Producer(amqp.conn.channel()).publish(b"now", exchange="", routing_key=queue)
    with amqp.reader(queue) as reader:
        for _ in range(100):
            if message := reader.get(1):
                assert message[0].body == b"now"
                break
        else:
            pytest.fail("the publish stayed in a buffer")


def test_a_connection_without_the_writer_publishes_unbatched(queue):
    from kombu import Connection

    from scheduling.config.conf import broker

    with Connection(broker().url) as conn:
        with framing.batched_writes(conn) as flush:
            flush()  # nothing to do, no error
        outcome = publish_confirmed(conn, [rabbit.Outgoing("", queue, b"x", {}, {"message_id": "m"})])
    assert outcome.confirmed == {0}

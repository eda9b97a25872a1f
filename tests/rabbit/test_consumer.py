"""The delivery loop's door to the broker: consume queues, hand messages over as plain data,
ack and reject by tag, notice a queue deleted under it, and say when the broker is gone."""

import uuid

import pytest

import rabbit
from tests.topology.helpers import publish
from topology import cascade

pytestmark = pytest.mark.broker


@pytest.fixture
def queues(amqp):
    names = [f"c-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        amqp.declare_queue(cascade.Queue(name))
    yield names
    for name in names:
        amqp.delete_queue(name)


def consumer(received, cancelled, prefetch=10):
    from scheduling.config.conf import broker

    return rabbit.Consumer(broker().url, prefetch=prefetch, on_message=received.append, on_cancel=cancelled.append)


def drain(c: rabbit.Consumer, received: list, count: int) -> None:
    for _ in range(50):
        if len(received) >= count:
            return
        c.wait(0.1, then_take=10)
    raise AssertionError(f"got {len(received)} of {count} messages")


def test_messages_arrive_as_plain_data_and_acked_ones_are_gone(amqp, queues):
    received, cancelled = [], []
    first, second = queues
    publish(amqp, "", first, b"a", {"k": 1})
    publish(amqp, "", second, b"b")
    with consumer(received, cancelled).connected() as c:
        c.consume(first)
        c.consume(second)
        assert c.queues == set(queues)
        drain(c, received, 2)
        assert sorted((m.queue, m.body) for m in received) == sorted([(first, b"a"), (second, b"b")])
        assert next(m for m in received if m.queue == first).headers == {"k": 1}
        for message in received:
            c.ack(message)
    assert (amqp.queue_depth(first), amqp.queue_depth(second)) == (0, 0)


def test_unacked_and_rejected_messages_go_back(amqp, queues):
    received, cancelled = [], []
    name = queues[0]
    for i in range(3):
        publish(amqp, "", name, b"%d" % i)
    with consumer(received, cancelled).connected() as c:
        c.consume(name)
        drain(c, received, 3)
        c.reject(received[0], requeue=True)
        c.ack(received[1])
        c.cancel(name)
        assert c.queues == set()
    assert amqp.queue_depth(name) == 2  # the rejected one and the one never acked


def test_the_prefetch_window_bounds_what_is_held(amqp, queues):
    received, cancelled = [], []
    name = queues[0]
    for i in range(20):
        publish(amqp, "", name, b"%d" % i)
    with consumer(received, cancelled, prefetch=5).connected() as c:
        c.consume(name)
        for _ in range(10):
            c.wait(0.05, then_take=50)
        assert len(received) == 5


def test_a_deleted_queue_cancels_its_consumer(amqp, queues):
    received, cancelled = [], []
    doomed, other = queues
    with consumer(received, cancelled).connected() as c:
        c.consume(doomed)
        c.consume(other)
        assert c.queue_exists(doomed)
        amqp.delete_queue(doomed)
        for _ in range(20):
            if cancelled:
                break
            c.wait(0.1)
        assert cancelled == [doomed] and c.queues == {other}
        assert not c.queue_exists(doomed)
        publish(amqp, "", other, b"still here")
        drain(c, received, 1)
    amqp.declare_queue(cascade.Queue(doomed))  # for the fixture's cleanup


def test_a_broker_that_is_gone_is_broker_unavailable():
    c = rabbit.Consumer("amqp://guest:guest@127.0.0.1:1//", prefetch=1, on_message=print, on_cancel=print)
    with pytest.raises(rabbit.BrokerUnavailable, match="cannot connect to RabbitMQ"):
        with c.connected():
            pass


def test_a_batch_of_acks_is_one_write_and_every_one_counts(amqp, queues):
    """Out of order and with a gap: 0-99 and 120-149 acked, 100 rejected, the rest left."""
    from rabbit import framing

    received, cancelled = [], []
    name = queues[0]
    for i in range(200):
        publish(amqp, "", name, b"%d" % i)
    with consumer(received, cancelled, prefetch=500).connected() as c:
        c.consume(name)
        drain(c, received, 200)
        c.reject(received[100], requeue=False)
        batcher = framing._batchers[c.conn.connection]
        writes, real = [], batcher.write
        batcher.write = lambda data: (writes.append(len(data)), real(data))
        try:
            c.ack_many(received[120:150][::-1] + received[:100][::-1])
        finally:
            batcher.write = real
        assert len(writes) == 1  # one multiple ack (0-99) and 30 single ones, one write
        assert len(c.unsettled) == 200 - 100 - 1 - 30
    assert amqp.queue_depth(name) == 69  # 101-119 and 150-199 went back unacked

"""publish_confirmed against the real broker: every message confirmed, unroutable ones returned
(mandatory), rejected ones nacked, a broken connection reported, the in-flight window kept."""

import socket
import uuid

import pytest

import rabbit
from rabbit.publish import publish_confirmed
from topology import cascade

pytestmark = pytest.mark.broker


def out(queue: str, n: int, **properties) -> list[rabbit.Outgoing]:
    return [rabbit.Outgoing("", queue, b"%d" % i, {"n": i}, {"message_id": uuid.uuid4().hex, **properties})
            for i in range(n)]


def test_every_message_is_confirmed_and_arrives_persistent(amqp, queue):
    outcome = publish_confirmed(amqp.conn, out(queue, 300), window=16)
    assert (outcome.confirmed, outcome.failed, outcome.error) == (set(range(300)), {}, None)
    with amqp.reader(queue) as reader:
        got = reader.get(1000)
        for message in got:
            reader.ack(message)
    assert [m.headers["n"] for m in got] == list(range(300))
    assert {m.properties["delivery_mode"] for m in got} == {2}


def test_an_empty_batch_publishes_nothing(amqp):
    assert publish_confirmed(amqp.conn, []) == rabbit.Outcome()


def test_unroutable_messages_are_returned_and_reported_failed(amqp, queue):
    batch = out(queue, 2) + out("no-such-queue-" + uuid.uuid4().hex[:6], 1) + out(queue, 1)
    outcome = publish_confirmed(amqp.conn, batch)
    assert outcome.confirmed == {0, 1, 3} and list(outcome.failed) == [2]
    assert outcome.failed[2].startswith("returned by (default): NO_ROUTE")


def test_messages_the_broker_refuses_are_nacked(amqp):
    """A full queue with reject-publish (v2's level queues overflow this way) nacks the excess."""
    name = f"full-{uuid.uuid4().hex[:8]}"
    amqp.declare_queue(cascade.Queue(name, arguments=(("x-max-length", 2), ("x-overflow", "reject-publish"))))
    try:
        outcome = publish_confirmed(amqp.conn, out(name, 5), window=1)
        assert outcome.confirmed == {0, 1}
        assert outcome.failed == {i: "nacked by the broker" for i in (2, 3, 4)}
    finally:
        amqp.delete_queue(name)


def break_socket(conn) -> None:
    """What a network failure does: the socket goes away under the connection."""
    conn.connection.transport.sock.shutdown(socket.SHUT_RDWR)


def test_a_connection_that_breaks_fails_every_unconfirmed_message(rabbit_vhost, queue):
    from scheduling.conf import broker

    with broker().session() as session:
        break_socket(session.conn)
        outcome = publish_confirmed(session.conn, out(queue, 3))
    assert outcome.error and outcome.confirmed == set() and set(outcome.failed) == {0, 1, 2}
    assert all(reason.startswith("not confirmed: ") for reason in outcome.failed.values())


def test_the_broker_publisher_opens_a_new_connection_after_a_failure(rabbit_vhost, queue):
    """Broker.publish keeps one connection per thread: the batch that meets a broken one fails
    (its rows stay pending for the sweeper), the next one goes out on a new connection."""
    from scheduling.conf import broker

    target = broker()
    assert target.publish(out(queue, 2)).confirmed == {0, 1}
    break_socket(target._local.conn)
    failed = target.publish(out(queue, 2))
    assert failed.error and failed.confirmed == set()
    assert target.publish(out(queue, 2)).confirmed == {0, 1}


def test_a_broker_that_cannot_be_reached_is_one_line():
    with pytest.raises(rabbit.BrokerUnavailable, match=r"^cannot connect to RabbitMQ at amqp://guest:\*\*@127.0.0.1:1//"):
        rabbit.Broker("amqp://guest:guest@127.0.0.1:1//").publish(out("x", 1))

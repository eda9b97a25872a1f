"""publish_confirmed against the real broker: every message confirmed, unroutable ones returned
(mandatory), rejected ones nacked, a broken connection reported, the in-flight window kept."""

import socket
import threading
import uuid

import pytest

import rabbit
import rabbit.publish
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
    from scheduling.config.conf import broker

    with broker().session() as session:
        break_socket(session.conn)
        outcome = publish_confirmed(session.conn, out(queue, 3))
    assert outcome.error and outcome.confirmed == set() and set(outcome.failed) == {0, 1, 2}
    assert all(reason.startswith("not confirmed: ") for reason in outcome.failed.values())


def test_the_broker_publisher_opens_a_new_connection_after_a_failure(rabbit_vhost, queue):
    """Broker.publish keeps one connection per thread: the batch that meets a broken one fails
    (its rows stay pending for the sweeper), the next one goes out on a new connection."""
    from scheduling.config.conf import broker

    target = broker()
    assert target.publish(out(queue, 2)).confirmed == {0, 1}
    conn = target.publisher_connections()[threading.current_thread().name]
    break_socket(conn)
    failed = target.publish(out(queue, 2))
    assert failed.error and failed.confirmed == set()
    assert target.publish(out(queue, 2)).confirmed == {0, 1}
    assert target.publisher_connections()[threading.current_thread().name] is not conn


def test_a_broker_that_cannot_be_reached_is_one_line():
    with pytest.raises(rabbit.BrokerUnavailable, match=r"^cannot connect to RabbitMQ at amqp://guest:\*\*@127.0.0.1:1//"):
        rabbit.Broker("amqp://guest:guest@127.0.0.1:1//").publish(out("x", 1))


def test_the_broker_publisher_keeps_one_channel_across_batches(rabbit_vhost, queue):
    """One connection and one confirm channel for every batch of a thread: opening a channel and
    selecting confirms per publish cost two round trips each (~1.4 ms of a 14 ms API call)."""
    from scheduling.config.conf import broker

    target = broker()
    target.publish(out(queue, 1))  # opened, if this thread had none
    before = (target.stats.connections, target.stats.channels, target.stats.batches)
    for n in range(1, 6):
        assert target.publish(out(queue, n)).confirmed == set(range(n))
    assert (target.stats.connections, target.stats.channels, target.stats.batches) == (
        before[0], before[1], before[2] + 5)
    with target.session() as session:
        assert session.queue_depth(queue) == 1 + 15


def test_a_kept_channel_tells_each_batch_its_own_returns_and_nacks(amqp, queue):
    """Delivery tags go on counting across batches: a later batch's confirms, returns and nacks are
    its own."""
    name = f"full-{uuid.uuid4().hex[:8]}"
    amqp.declare_queue(cascade.Queue(name, arguments=(("x-max-length", 2), ("x-overflow", "reject-publish"))))
    confirm = rabbit.publish.ConfirmChannel(amqp.conn)
    try:
        assert confirm.publish(out(queue, 3)).confirmed == {0, 1, 2}
        nowhere = out("no-such-queue-" + uuid.uuid4().hex[:6], 1)
        second = confirm.publish(out(queue, 1) + nowhere + out(name, 3), window=1)
        assert second.confirmed == {0, 2, 3} and second.error is None
        assert second.failed[1].startswith("returned by (default): NO_ROUTE")
        assert second.failed[4] == "nacked by the broker"
        assert confirm.publish(out(queue, 2)).confirmed == {0, 1}  # the same channel, still right
        assert confirm.usable
    finally:
        confirm.close()
        amqp.delete_queue(name)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="POSIX")
def test_a_forked_child_opens_its_own_publisher_and_leaves_the_parents_alone(rabbit_vhost, queue):
    """gunicorn forks its workers, Celery its pool: a child finds the parent's connection (another
    pid), drops it without closing it (that would close the parent's), and opens its own."""
    import os

    from scheduling.config.conf import broker

    target = broker()
    assert target.publish(out(queue, 1)).confirmed == {0}
    parent_conn = target.publisher_connections()[threading.current_thread().name]
    opened = target.stats.connections
    pid = os.fork()
    if pid == 0:
        try:
            ok = (target.publish(out(queue, 1)).confirmed == {0} and target.stats.connections == opened + 1
                  and target.publisher_connections()[threading.current_thread().name] is not parent_conn)
            target.close_publisher()
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert target.publish(out(queue, 1)).confirmed == {0}  # the parent's connection still works
    assert target.stats.connections == opened
    with target.session() as session:
        assert session.queue_depth(queue) == 3

"""A Session against the real broker: declare and bind what topology plans, read a queue with
basic_get, and get one-line errors for clashes and missing pieces."""

import uuid

import pytest

import rabbit
from tests.topology.helpers import publish
from topology import cascade

pytestmark = pytest.mark.broker


@pytest.fixture
def name():
    return f"s-{uuid.uuid4().hex[:8]}"


def test_queue_depth_is_none_for_a_missing_queue(amqp, name):
    assert amqp.queue_depth(name) is None
    amqp.declare_queue(cascade.Queue(name))
    try:
        publish(amqp, "", name)
        assert amqp.queue_depth(name) == 1
        assert amqp.purge_queue(name) == 1 and amqp.queue_depth(name) == 0
    finally:
        amqp.delete_queue(name)
    assert amqp.queue_depth(name) is None


def test_binding_to_a_missing_exchange_is_topology_missing(amqp, name):
    amqp.declare_queue(cascade.Queue(name))
    try:
        with pytest.raises(rabbit.TopologyMissing, match=r"no exchange 'nowhere\.delay-delivery'"):
            amqp.bind(cascade.endpoint_binding(cascade.V2.with_(prefix="nowhere."), name))
    finally:
        amqp.delete_queue(name)


def test_bind_and_unbind_route_an_endpoint(amqp, declared, name):
    plan = declared(cascade.V2, levels=2)
    amqp.declare_queue(cascade.endpoint_queue(name))
    binding = cascade.endpoint_binding(plan.version, name)
    try:
        amqp.bind(binding)
        publish(amqp, plan.delivery_exchange, cascade.routing_key(0, name, 2))
        assert amqp.queue_depth(name) == 1
        amqp.unbind(binding)
        publish(amqp, plan.delivery_exchange, cascade.routing_key(0, name, 2))
        assert amqp.queue_depth(name) == 1  # the second went to the unroutable queue
        assert amqp.queue_depth(cascade.unroutable_name(plan.version.prefix)) == 1
    finally:
        amqp.delete_queue(name)


def test_redeclaring_with_other_arguments_is_a_conflict_in_one_line(amqp, name):
    amqp.declare_queue(cascade.Queue(name, arguments=(("x-message-ttl", 1000),)))
    try:
        with pytest.raises(rabbit.TopologyConflict) as caught:
            amqp.declare_queue(cascade.Queue(name, arguments=(("x-message-ttl", 2000),)))
        assert "inequivalent arg 'x-message-ttl'" in str(caught.value) and "\n" not in str(caught.value)
        assert amqp.queue_depth(name) == 0  # the session still works after the broker closed a channel
    finally:
        amqp.delete_queue(name)


def test_reader_gets_acks_rejects_and_gives_back_the_rest(amqp, name):
    amqp.declare_queue(cascade.Queue(name))
    try:
        for i in range(5):
            publish(amqp, "", name, b"%d" % i, {"i": i})
        with amqp.reader(name) as reader:
            first = reader.get(2)
            assert [(m.body, m.headers, m.queue, m.routing_key) for m in first] == [
                (b"0", {"i": 0}, name, name), (b"1", {"i": 1}, name, name)]
            reader.ack(first[0])
            reader.reject(first[1], requeue=False)  # dropped
            rest = reader.get(10)
            assert [m.body for m in rest] == [b"2", b"3", b"4"]
        assert amqp.queue_depth(name) == 3  # read, never acked: back in the queue
        with amqp.reader(name) as reader:
            again = reader.get(10)
            assert [m.body for m in again] == [b"2", b"3", b"4"] and all(m.redelivered for m in again)
    finally:
        amqp.delete_queue(name)

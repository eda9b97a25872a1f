"""The readiness probe against the real broker: missing names found by passive declares, a vhost
that cannot be had is BrokerUnavailable, and a silent peer costs at most the timeout."""

import socket
import time

import pytest

import rabbit
from scheduling.config.conf import broker

pytestmark = pytest.mark.broker


def test_existing_names_are_not_missing(amqp, queue):
    assert broker().probe(exchanges=["amq.topic", "amq.direct"], queues=[queue]) == []


def test_missing_names_are_listed_in_order_up_to_the_limit(amqp, queue):
    found = broker().probe(exchanges=["amq.topic", "no-such-exchange"], queues=["no-q1", queue, "no-q2", "no-q3"])
    assert found == ["no-such-exchange", "no-q1", "no-q2"]  # three at most; the live queue is not among them


def test_a_vhost_that_does_not_exist_is_unavailable(rabbit_vhost):
    with pytest.raises(rabbit.BrokerUnavailable):
        rabbit.Broker("amqp://guest:guest@127.0.0.1:5672/dp-test-no-such-vhost").probe()


def test_a_peer_that_never_speaks_costs_the_timeout():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        started = time.monotonic()
        with pytest.raises(rabbit.BrokerUnavailable):
            rabbit.Broker(f"amqp://guest:guest@127.0.0.1:{silent.getsockname()[1]}//").probe(timeout=0.3)
        assert time.monotonic() - started < 1.5


def test_a_refused_connection_is_not_tried_again():
    """kombu's connect() sleeps 2 s and tries once more; a probe makes one attempt."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens
    started = time.monotonic()
    with pytest.raises(rabbit.BrokerUnavailable):
        rabbit.Broker(f"amqp://guest:guest@127.0.0.1:{port}//").probe(timeout=1)
    assert time.monotonic() - started < 0.5

"""A failover URL (kombu's ``amqp://a;amqp://b``): a node that refuses is skipped, for AMQP
connections and for the management API; with no node left, one readable error naming each."""

import pytest

from rabbit import Broker, BrokerUnavailable, Management
from rabbit.connection import open_connection, release
from scheduling.config.conf import broker

pytestmark = pytest.mark.broker
DEAD_AMQP, DEAD_HTTP = "amqp://guest:guest@127.0.0.1:1", "http://guest:guest@127.0.0.1:1"


def test_a_refusing_first_node_is_skipped(rabbit_vhost):
    live = broker().url
    conn = open_connection(f"{DEAD_AMQP}/{rabbit_vhost};{live}")
    try:
        assert conn.connected and "127.0.0.1:1/" not in conn.as_uri()
    finally:
        release(conn)


def test_a_session_and_a_publish_fail_over_too(rabbit_vhost):
    cluster = Broker(f"{DEAD_AMQP}/{rabbit_vhost};{broker().url}", broker().management_url)
    with cluster.session() as session:
        assert session.queue_depth("amq.rabbitmq.no-such-queue") is None
    assert cluster.publish([]).error is None


def test_no_live_node_is_one_error_naming_each(rabbit_vhost):
    with pytest.raises(BrokerUnavailable) as failure:
        open_connection(f"{DEAD_AMQP}/{rabbit_vhost};amqp://guest:guest@127.0.0.1:2/{rabbit_vhost}")
    assert str(failure.value).count("127.0.0.1:") == 2 and "guest" not in str(failure.value).replace("guest:**", "")


def test_the_management_api_fails_over_and_stays_on_the_node_that_answered(rabbit_vhost):
    management = Management(f"{DEAD_HTTP};{broker().management_url}")
    assert rabbit_vhost in management.vhosts()
    assert management.base != management.bases[0]  # sticks to the live node


def test_a_node_that_never_answers_counts_as_down_after_the_broker_s_connect_timeout(rabbit_vhost):
    """A node that takes the TCP connection and says nothing (a hung node, a partition) is given
    up after the Broker's connect timeout, and the next node of the URL takes the session."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (the kernel's backlog), never speaks AMQP
    try:
        url = f"amqp://guest:guest@127.0.0.1:{silent.getsockname()[1]}/{rabbit_vhost}"
        with pytest.raises(BrokerUnavailable, match="timed out"):
            with Broker(url, connect_timeout=0.3).session():
                pass
        with Broker(f"{url};{broker().url}", broker().management_url, connect_timeout=0.3).session() as session:
            assert session.queue_depth("amq.rabbitmq.no-such-queue") is None
    finally:
        silent.close()

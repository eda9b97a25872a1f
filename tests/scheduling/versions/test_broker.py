"""Reads of the broker: whether a cascade is as planned (without recording anything), and the
in-flight figures read from the broker's counts (this run's own vhost: v1 and v2 declared empty
by the conftest)."""

import pytest

from harness.endpoints import bind_endpoint
from harness.waiting import wait_until
from scheduling.config.conf import broker
from scheduling.versions.broker import (
    topology_check,
    topology_get_in_flight,
    topology_version_count_in_flight,
)
from scheduling.versions.services import topology_provision
from tests.topology.helpers import publish
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]


def test_check_names_what_is_missing_and_records_nothing(versions, amqp):
    v1 = versions["v1"]
    topology_provision(version=v1.cascade)
    assert topology_check(version=v1.cascade).problems == []
    amqp.delete_queue(cascade.level_name(v1.prefix, 3))
    assert topology_check(version=v1.cascade).problems[0] == "missing queue dp.delay-level-03"
    v1.refresh_from_db()
    assert v1.verified_at is None and v1.verify_problems == []  # a read: recording is topology_verify's
    topology_provision(version=v1.cascade)


def test_in_flight_reads_each_level_the_unroutable_queue_and_the_bindings(platform, amqp, endpoint_row):
    v2 = platform["v2"]
    bind_endpoint(amqp, v2.cascade, endpoint_row.name)
    publish(amqp, cascade.first_exchange(v2.cascade, 300), cascade.routing_key(300, endpoint_row.name))  # level 8
    publish(amqp, cascade.delivery_exchange(v2.prefix), cascade.routing_key(0, "nobody"))  # unroutable
    management = broker().management

    def counted():  # the management API's statistics lag a few seconds
        return (management.queue_depths(broker().vhost).get(cascade.level_name(v2.prefix, 8), {})
                .get("messages") == 1)

    wait_until(counted, 20, 0.5, "the broker's counts")
    view = topology_get_in_flight(version=v2)
    assert [level.level for level in view.levels] == list(range(27, -1, -1))
    assert {level.level: level.messages for level in view.levels if level.messages} == {8: 1}
    assert view.in_cascade == 1 and view.levels[27 - 8].ttl_ms == 256_000
    wait_until(lambda: topology_get_in_flight(version=v2).unroutable == 1, 20, 0.5, "the unroutable count")
    assert [(b.endpoint, b.on_broker) for b in view.bindings] == [(endpoint_row.name, True)]
    wait_until(lambda: topology_version_count_in_flight() == {"v1": 0, "v2": 1, "v3": 0}, 20, 0.5, "every version's counts")

"""Cascades on the broker through the services: provisioning records itself on the version's
row, verifying records what is wrong, and the in-flight figures read the broker's counts
(this module's own vhost: v1 and v2 declared empty by the conftest)."""

import pytest

from scheduling.conf import broker
from scheduling.models import TopologyVersion
from scheduling.services import topology_in_flight, topology_provision, topology_verify, versions_in_flight
from tests.support import bind_endpoint, wait_until
from tests.topology.helpers import publish
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]


def test_provision_and_verify_record_on_the_platforms_row(versions, amqp):
    v1 = versions["v1"]
    result = topology_provision(version=v1.cascade)
    assert result.recorded and len(result.plan.queues) == 29
    assert topology_verify(version=v1.cascade).problems == []
    amqp.delete_queue(cascade.level_name(v1.prefix, 3))
    problems = topology_verify(version=v1.cascade).problems
    assert problems[0] == "missing queue dp.delay-level-03"
    v1.refresh_from_db()
    assert v1.provisioned_at and v1.verified_at and v1.verify_problems == problems
    topology_provision(version=v1.cascade)
    assert topology_verify(version=v1.cascade).problems == []


def test_another_prefix_is_declared_but_not_recorded(versions, amqp, unique_prefix):
    version = cascade.V2.with_(prefix=unique_prefix, levels=2)
    try:
        assert topology_provision(version=version).recorded is False
        assert topology_verify(version=version).problems == []
    finally:
        amqp.teardown(cascade.cascade_plan(version))
    assert TopologyVersion.objects.get(name="v2").provisioned_at is None


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
    view = topology_in_flight(v2)
    assert [level.level for level in view.levels] == list(range(27, -1, -1))
    assert {level.level: level.messages for level in view.levels if level.messages} == {8: 1}
    assert view.in_cascade == 1 and view.levels[27 - 8].ttl_ms == 256_000
    wait_until(lambda: topology_in_flight(v2).unroutable == 1, 20, 0.5, "the unroutable count")
    assert [(b.endpoint, b.on_broker) for b in view.bindings] == [(endpoint_row.name, True)]
    wait_until(lambda: versions_in_flight() == {"v1": 0, "v2": 1, "v3": 0}, 20, 0.5, "every version's counts")

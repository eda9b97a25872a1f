"""Cascades on the broker through the services: provisioning records itself on the version's
row, and verifying records what is wrong (the reads behind them:
tests/scheduling/versions/test_broker.py)."""

import pytest

from scheduling.models import TopologyVersion
from scheduling.versions.services import topology_provision, topology_verify
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

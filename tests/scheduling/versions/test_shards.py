"""Sharded versions through the platform's services, on the live broker (this module's vhost):
DELAY_SHARDS=v2=2,v3=2 provisions and records two shards, the relay publishes each row into the
shard its id picks and every message reaches its endpoint, verify passes (with the replication
check, trivial on one node) and, once the count is lowered, warns of the shard left behind with
the messages it still holds, deleting nothing."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from harness.endpoints import bind_endpoint
from harness.waiting import wait_until
from scheduling.config.conf import broker
from scheduling.messages import wire
from scheduling.messages.relay import relay_publish
from scheduling.models import Endpoint, ScheduledMessage, TopologyVersion
from scheduling.versions.broker import topology_get_in_flight, topology_version_count_in_flight
from scheduling.versions.services import topology_provision, topology_verify
from tests.topology.helpers import get, publish
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
Status = ScheduledMessage.Status


@pytest.fixture
def two_shards(settings, platform, amqp):
    """v2 and v3 with two shards, provisioned; the second shards are removed afterwards (this
    module's other tests see one shard each)."""
    settings.DELAY_SHARDS = "v2=2,v3=2"
    rows = {name: TopologyVersion.objects.get(name=name) for name in ("v2", "v3")}
    for row in rows.values():
        topology_provision(version=row.cascade)
    yield rows
    for row in rows.values():
        amqp.teardown(cascade.shard_plan(row.cascade.with_(shards=2), 1))


def ids_on_both_shards(n: int) -> list[uuid.UUID]:
    ids = [uuid.UUID(int=(i * 104729) << 70 | i) for i in range(n)]
    assert {cascade.shard_of(i, 2) for i in ids} == {0, 1}
    return ids


def running_node() -> str:
    (node,) = [n["name"] for n in broker().management.nodes() if n.get("running")]
    return node


def test_provisioning_declares_and_records_every_shard(two_shards):
    for row in two_shards.values():
        row.refresh_from_db()
        assert row.shards == 2 and row.provisioned_at is not None
        result = topology_verify(version=row.cascade)
        assert result.problems == [] and result.warnings == []
        # the replication check on one node: every quorum queue has its one member; all leaders here
        assert result.leaders == f"quorum leaders: {running_node()} {2 * 28 + 1}"
        names = {q["name"] for q in broker().management.queues(broker().vhost)}
        assert {cascade.level_name(row.prefix, 5, 1), cascade.level_name(row.prefix, 5)} <= names


@pytest.mark.parametrize("name", ["v2", "v3"])
def test_the_relay_publishes_each_row_into_its_shard_and_every_message_arrives(two_shards, amqp, endpoint_name,
                                                                              name):
    row = two_shards[name]
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=row)
    bind_endpoint(amqp, row.cascade, endpoint_name)
    try:
        now = timezone.now()
        messages = [ScheduledMessage.objects.create(
            id=message_id, endpoint=endpoint, topology=row, payload={}, due_at=now + timedelta(seconds=2.5),
            requested_delay_ms=2500) for message_id in ids_on_both_shards(6)]
        assert relay_publish(ids=[str(m.id) for m in messages]).published == len(messages)
        for message in messages:
            message.refresh_from_db()
            # 2.5 s less the arrival margin: 2 s, level 1 of the shard its id picks
            assert message.first_exchange == cascade.level_name(row.prefix, 1, cascade.shard_of(message.id, 2))
        arrived = {}

        def all_arrived():
            while (found := get(amqp, endpoint_name)) is not None:  # on v3, an envelope per shard
                arrived.update(dict.fromkeys(wire.carried_ids(found.headers, found.body), found))
            return len(arrived) == len(messages)

        wait_until(all_arrived, 10, 0.05, "every message at the endpoint queue")
        for message in messages:
            queues = {death["queue"] for death in arrived[str(message.id)].headers["x-death"]}
            assert {cascade.shard_of_name(row.prefix, q) for q in queues} == {cascade.shard_of(message.id, 2)}
    finally:
        amqp.delete_queue(endpoint_name)


def test_lowering_the_count_leaves_the_shard_and_verify_warns_with_its_messages(two_shards, settings, amqp):
    v3 = two_shards["v3"]
    parked = cascade.route(v3.cascade, 3600, "somewhere", 1)  # an hour in shard 1's level 11
    for _ in range(3):
        publish(amqp, parked.exchange, parked.routing_key, b"x", parked.headers)
    settings.DELAY_SHARDS = "v2=2"  # v3 back to one shard
    assert v3.cascade.shards == 1

    def warned():
        result = topology_verify(version=v3.cascade)
        return result if result.warnings and "holding 3 message(s)" in result.warnings[0] else None

    result = wait_until(warned, 30, 0.5, "the broker's count of shard 1")
    assert result.problems == []
    (warning,) = result.warnings
    assert warning.startswith("shard 1 is beyond the 1 shard(s) configured and still exists (28 queue(s), "
                              "29 exchange(s) named *-s1) holding 3 message(s)")
    assert "dp.v3.delay-delivery, so nothing is lost" in warning
    provisioned = topology_provision(version=v3.cascade)  # provisioning again deletes nothing
    assert len(provisioned.plan.queues) == 29
    assert amqp.queue_depth(cascade.level_name(v3.prefix, 11, 1)) == 3
    v3.refresh_from_db()
    assert v3.shards == 1
    view = topology_get_in_flight(version=v3)
    assert view.shards == 1 and view.leftover == {1: 3}
    assert topology_version_count_in_flight()["v3"] == 3  # still on its way: counted under its version
    amqp.purge_queue(cascade.level_name(v3.prefix, 11, 1))


def test_in_flight_sums_each_level_over_the_shards_with_each_shards_count(two_shards, amqp):
    v2 = two_shards["v2"]
    version = v2.cascade
    for shard, copies in ((0, 2), (1, 3)):
        r = cascade.route(version, 300, "somewhere", shard)  # level 8
        for _ in range(copies):
            publish(amqp, r.exchange, r.routing_key, b"x")
    try:
        level = wait_until(lambda: (lv := topology_get_in_flight(version=v2).levels[27 - 8]).messages == 5 and lv, 30, 0.5,
                           "the broker's counts")
        assert [(s.shard, s.queue, s.messages) for s in level.shards] == [
            (0, "dp.v2.delay-level-08", 2), (1, "dp.v2.delay-level-08-s1", 3)]
        assert level.per_shard == "s0 2 · s1 3"
        assert topology_get_in_flight(version=v2).in_cascade == 5 and topology_get_in_flight(version=v2).leftover == {}
    finally:
        for shard in (0, 1):
            amqp.purge_queue(cascade.level_name(v2.prefix, 8, shard))


def test_a_count_raised_before_provisioning_loses_nothing(settings, platform, amqp, endpoint_name):
    """DELAY_SHARDS raised in a process before provision_delays ran: a publish into the missing
    shard is refused, which closes the channel, so the whole batch (the other shards' rows too)
    stays pending with the reason for the sweeper to retry; once the shard is provisioned every
    row is published. Provision first, then restart (docs/operations/shards.md, "Raising k")."""
    settings.DELAY_SHARDS = "v3=2"
    v3 = TopologyVersion.objects.get(name="v3")
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=v3)
    bind_endpoint(amqp, v3.cascade, endpoint_name)
    try:
        now = timezone.now()
        rows = [ScheduledMessage.objects.create(id=message_id, endpoint=endpoint, topology=v3, payload={},
                                                due_at=now + timedelta(hours=1), requested_delay_ms=3_600_000)
                for message_id in ids_on_both_shards(4)]
        result = relay_publish(ids=[str(r.id) for r in rows])
        assert (result.published, result.failed) == (0, 4)
        stuck = ScheduledMessage.objects.filter(id__in=[r.id for r in rows], status=Status.PENDING)
        assert stuck.count() == 4
        assert all("no exchange 'dp.v3.delay-level-11-s1'" in r.last_error for r in stuck)
        topology_provision(version=v3.cascade)
        assert relay_publish(ids=[str(r.id) for r in stuck]).published == stuck.count()
        assert ScheduledMessage.objects.filter(id__in=[r.id for r in rows], status=Status.PUBLISHED).count() == 4
    finally:
        amqp.delete_queue(endpoint_name)
        amqp.teardown(cascade.shard_plan(v3.cascade.with_(shards=2), 1))

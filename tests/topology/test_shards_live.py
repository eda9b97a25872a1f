"""Sharded cascades on the real RabbitMQ (this run's vhost): two shards of v2 (topic) and v3
(direct) declared shard by shard, messages whose ids land on both shards arrive at the one
endpoint queue bound on the shared delivery exchange, after waiting only in their own shard's
queues; the broker matches the plan and declaring again changes nothing."""

import time
import uuid

import pytest

from harness.endpoints import bind_endpoint
from scheduling.config.conf import broker
from topology import cascade
from topology.diff import diff_plan, leftover_shards

from .helpers import get, publish, snapshot

pytestmark = pytest.mark.broker
VERSIONS = pytest.mark.parametrize("version", [cascade.V2, cascade.V3], ids=["v2", "v3"])


@pytest.fixture
def sharded(amqp, unique_prefix):
    """sharded(version, shards) declares the version under this test's prefix, shard by shard as
    provisioning does (shard s from node s); everything is removed afterwards."""
    versions = []

    def declare(version, shards=2):
        v = version.with_(prefix=unique_prefix, shards=shards)
        for shard, plan in enumerate(cascade.shard_plans(v)):
            amqp.declare(plan, first_node=shard)
        versions.append(v)
        return v

    yield declare
    for v in versions:
        amqp.teardown(cascade.cascade_plan(v))


def ids_on(shards: int, each: int) -> list[str]:
    """``each`` message ids per shard, in turn."""
    found: dict[int, list[str]] = {shard: [] for shard in range(shards)}
    n = 0
    while any(len(ids) < each for ids in found.values()):
        candidate = str(uuid.UUID(int=(n * 7919) << 64 | n))
        n += 1
        if len(found[cascade.shard_of(candidate, shards)]) < each:
            found[cascade.shard_of(candidate, shards)].append(candidate)
    return [ids[i] for i in range(each) for ids in found.values()]


@VERSIONS
def test_messages_of_both_shards_arrive_at_the_endpoint_through_their_own_shard(amqp, sharded, unique_prefix,
                                                                                 version):
    v = sharded(version)
    queue = bind_endpoint(amqp, v, unique_prefix.replace(".", "") + "-ep")
    try:
        sent = {}
        for message_id, delay in zip(ids_on(2, 2), (1, 2, 3, 1)):
            shard = cascade.shard_of(message_id, v.shards)
            r = cascade.route(v, delay, queue, shard)
            publish(amqp, r.exchange, r.routing_key, message_id.encode(), r.headers)
            sent[message_id] = (shard, delay, time.monotonic())
        assert {shard for shard, _, _ in sent.values()} == {0, 1}
        arrived = {}
        deadline = time.monotonic() + 10
        while len(arrived) < len(sent) and time.monotonic() < deadline:
            message = get(amqp, queue)
            if message is None:
                time.sleep(0.02)
                continue
            arrived[message.body.decode()] = (message, time.monotonic())
        assert set(arrived) == set(sent), f"{len(arrived)} of {len(sent)} arrived"
        for message_id, (message, at) in arrived.items():
            shard, delay, published = sent[message_id]
            assert at - published >= delay - 0.05  # never before its delay
            waited = {death["queue"] for death in message.headers["x-death"]}
            expected = {cascade.level_name(v.prefix, level, shard) for level in cascade.set_levels(delay, v.levels)}
            assert waited == expected, (message_id, shard, waited)
    finally:
        amqp.delete_queue(queue)


@VERSIONS
def test_the_ingest_exchange_of_a_shard_starts_the_message_on_that_shard(amqp, sharded, version):
    v = sharded(version, shards=3)
    for shard in range(3):
        r = cascade.route(v, 10, "nobody", shard)
        publish(amqp, cascade.ingest_exchange(v.prefix, shard), r.routing_key, b"x", r.headers)
        assert get(amqp, cascade.level_name(v.prefix, 3, shard)) is not None, shard
        assert all(get(amqp, cascade.level_name(v.prefix, 3, other)) is None for other in range(3))


@VERSIONS
def test_a_sharded_cascade_matches_its_plan_and_declaring_again_changes_nothing(amqp, sharded, rabbit_vhost,
                                                                                 version):
    v = sharded(version)
    management = broker().management
    listings = management.listings(rabbit_vhost)
    assert diff_plan(cascade.cascade_plan(v), *listings) == []
    assert leftover_shards(v, listings[0], listings[1]) == []
    before = snapshot(management, rabbit_vhost, v.prefix)
    queues = len(cascade.cascade_plan(v).queues)
    assert len(before[1]) == queues == 2 * v.levels + 1
    for shard, plan in enumerate(cascade.shard_plans(v)):
        assert amqp.declare(plan, first_node=shard) == []
    assert snapshot(management, rabbit_vhost, v.prefix) == before
    # one shard fewer: the broker still has shard 1, found as a shard beyond the count
    fewer = v.with_(shards=1)
    listings = management.listings(rabbit_vhost)
    assert diff_plan(cascade.cascade_plan(fewer), *listings) == []
    (left,) = leftover_shards(fewer, listings[0], listings[1])
    assert (left.shard, left.queues, left.exchanges) == (1, v.levels, v.levels + 1)

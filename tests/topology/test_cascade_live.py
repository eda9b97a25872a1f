"""The adapter against the real RabbitMQ, in this run's own vhost: routing, timing, idempotence."""

import time

import pytest

import rabbit
from scheduling.conf import broker
from tests.support import bind_endpoint
from topology import cascade
from topology.definitions import plan_definitions
from topology.diff import diff_plan

from .helpers import get, publish, snapshot, wait_get

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("version", [cascade.V1, cascade.V2], ids=["v1", "v2"])
def test_each_level_bit_routes_to_that_levels_queue(amqp, declared, version):
    plan = declared(version)
    v = plan.version
    for level in range(v.levels):
        delay = (1 << level) | (1 if level else 0)  # highest bit = level, plus a lower bit
        key = cascade.routing_key(delay, "nobody", v.levels)
        publish(amqp, cascade.first_exchange(v, delay), key)
        message = get(amqp, cascade.level_name(v.prefix, level))
        assert message is not None, f"level {level}: not in its queue"
        assert message.delivery_info["routing_key"] == key
        for lower in range(level):
            assert get(amqp, cascade.level_name(v.prefix, lower)) is None


@pytest.mark.parametrize("version", [cascade.V1, cascade.V2], ids=["v1", "v2"])
def test_delayed_message_comes_out_after_its_delay_not_before(amqp, declared, version):
    plan = declared(version)
    v = plan.version
    queue = bind_endpoint(amqp, v.prefix, f"{v.prefix[:-1]}-dest".replace(".", "-"))
    try:
        for delay in (2, 3):
            started = time.monotonic()
            publish(amqp, cascade.first_exchange(v, delay), cascade.routing_key(delay, queue, v.levels), b"%d" % delay)
            message, arrived = wait_get(amqp, queue, timeout=delay + 3)
            assert message is not None, f"{delay}s message never arrived"
            assert message.body == b"%d" % delay
            assert delay <= arrived - started < delay + 1.5
    finally:
        amqp.delete_queue(queue)


def test_unbound_destination_is_kept_in_the_unroutable_queue(amqp, declared):
    v = declared().version
    unroutable = cascade.unroutable_name(v.prefix)
    publish(amqp, cascade.first_exchange(v, 0), cascade.routing_key(0, "ghost", v.levels), b"now")
    message, _ = wait_get(amqp, unroutable, timeout=2)
    assert message is not None and message.body == b"now"
    publish(amqp, cascade.first_exchange(v, 1), cascade.routing_key(1, "ghost", v.levels), b"after-1s")
    assert get(amqp, unroutable) is None
    message, _ = wait_get(amqp, unroutable, timeout=4)
    assert message is not None and message.body == b"after-1s"
    assert message.delivery_info["routing_key"].endswith(".ghost")


def test_ingest_exchange_routes_a_full_key_to_its_start_level(amqp, declared):
    v = declared().version
    ingest = cascade.ingest_exchange(v.prefix)
    for delay, level in ((10, 3), (5, 2), (1 << 27, 27), (3, 1)):
        publish(amqp, ingest, cascade.routing_key(delay, "nobody", v.levels))
        assert get(amqp, cascade.level_name(v.prefix, level)) is not None, (delay, level)
    queue = bind_endpoint(amqp, v.prefix, v.prefix.replace(".", "") + "-zero")
    try:
        publish(amqp, ingest, cascade.routing_key(0, queue, v.levels), b"zero")
        message, _ = wait_get(amqp, queue, timeout=2)
        assert message is not None and message.body == b"zero"
    finally:
        amqp.delete_queue(queue)


def test_declaring_twice_changes_nothing_and_keeps_messages(amqp, declared, rabbit_vhost):
    plan = declared()
    v = plan.version
    management = broker().management
    before = snapshot(management, rabbit_vhost, v.prefix)
    assert len(before[0]) == 31 and len(before[1]) == 29 and len(before[2]) == 86
    publish(amqp, cascade.first_exchange(v, 1 << 27), cascade.routing_key(1 << 27, "x", v.levels))
    amqp.declare(plan)
    assert snapshot(management, rabbit_vhost, v.prefix) == before
    assert amqp.queue_depth(cascade.level_name(v.prefix, 27)) == 1
    assert diff_plan(plan, *management.listings(rabbit_vhost)) == []


def test_v1_and_v2_coexist_and_reach_the_same_endpoint(amqp, declared, unique_prefix):
    v1 = declared(cascade.V1, prefix=unique_prefix + "v1.").version
    v2 = declared(cascade.V2, prefix=unique_prefix + "v2.").version
    endpoint = unique_prefix.replace(".", "") + "-both"
    for v in (v1, v2):
        bind_endpoint(amqp, v.prefix, endpoint)
    try:
        for v in (v1, v2):
            publish(amqp, cascade.first_exchange(v, 1), cascade.routing_key(1, endpoint, v.levels), v.name.encode())
        bodies = set()
        for _ in range(2):
            message, _ = wait_get(amqp, endpoint, timeout=4)
            assert message is not None
            bodies.add(message.body)
        assert bodies == {b"v1", b"v2"}
        management = broker().management
        for v in (v1, v2):
            assert diff_plan(cascade.cascade_plan(v), *management.listings(broker().vhost)) == []
    finally:
        amqp.delete_queue(endpoint)


def test_conflicting_queue_is_one_readable_error(amqp, declared, unique_prefix):
    declared(cascade.V2, levels=2)
    clash = cascade.cascade_plan(cascade.V1.with_(prefix=unique_prefix, levels=2))
    with pytest.raises(rabbit.TopologyConflict, match="inequivalent arg"):
        amqp.declare(clash)


def test_exported_definitions_import_into_a_complete_cascade(amqp, unique_prefix, rabbit_vhost):
    plan = cascade.cascade_plan(cascade.V2.with_(prefix=unique_prefix))
    management = broker().management
    management.import_definitions(rabbit_vhost, plan_definitions(plan, rabbit_vhost))
    try:
        assert diff_plan(plan, *management.listings(rabbit_vhost)) == []
    finally:
        amqp.teardown(plan)
    # and teardown removed every piece again
    assert len(diff_plan(plan, *management.listings(rabbit_vhost))) == 31 + 29 + 86

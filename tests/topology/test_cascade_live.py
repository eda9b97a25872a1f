"""The adapter against the real RabbitMQ, in this run's own vhost: routing, timing, idempotence,
for every version (v1, v2: topic keys; v3: direct exchanges, alternate exchanges, CC keys)."""

import time

import pytest

import rabbit
from harness.endpoints import bind_endpoint
from scheduling.config.conf import broker
from topology import cascade
from topology.definitions import plan_definitions
from topology.diff import diff_plan, diff_warnings

from .helpers import get, publish, snapshot, wait_get

pytestmark = pytest.mark.broker
VERSIONS = pytest.mark.parametrize("version", [cascade.V1, cascade.V2, cascade.V3], ids=["v1", "v2", "v3"])
COUNTS = {"v1": (31, 29, 86), "v2": (31, 29, 86), "v3": (31, 29, 29)}  # exchanges, queues, bindings


def send(conn, version, delay: int, destination: str, body: bytes = b"x", exchange: str | None = None) -> None:
    r = cascade.route(version, delay, destination)
    publish(conn, exchange or r.exchange, r.routing_key, body, r.headers)


@VERSIONS
def test_each_level_bit_routes_to_that_levels_queue(amqp, declared, version):
    v = declared(version).version
    for level in range(v.levels):
        delay = (1 << level) | (1 if level else 0)  # highest bit = level, plus a lower bit
        send(amqp, v, delay, "nobody")
        message = get(amqp, cascade.level_name(v.prefix, level))
        assert message is not None, f"level {level}: not in its queue"
        assert message.delivery_info["routing_key"] == cascade.route(v, delay, "nobody").routing_key
        for lower in range(level):
            assert get(amqp, cascade.level_name(v.prefix, lower)) is None


@VERSIONS
def test_delayed_message_comes_out_after_its_delay_not_before(amqp, declared, version):
    v = declared(version).version
    queue = bind_endpoint(amqp, v, f"{v.prefix[:-1]}-dest".replace(".", "-"))
    try:
        for delay in (2, 3):
            started = time.monotonic()
            send(amqp, v, delay, queue, b"%d" % delay)
            message, arrived = wait_get(amqp, queue, timeout=delay + 3)
            assert message is not None, f"{delay}s message never arrived"
            assert message.body == b"%d" % delay
            assert delay <= arrived - started < delay + 1.5
    finally:
        amqp.delete_queue(queue)


@VERSIONS
def test_unbound_destination_is_kept_in_the_unroutable_queue(amqp, declared, version):
    v = declared(version).version
    unroutable = cascade.unroutable_name(v.prefix)
    send(amqp, v, 0, "ghost", b"now")
    message, _ = wait_get(amqp, unroutable, timeout=2)
    assert message is not None and message.body == b"now"
    send(amqp, v, 1, "ghost", b"after-1s")
    assert get(amqp, unroutable) is None
    message, _ = wait_get(amqp, unroutable, timeout=4)
    assert message is not None and message.body == b"after-1s"
    assert cascade.read_route(v, message.delivery_info["routing_key"], message.headers.get("CC"))[1] == "ghost"


@VERSIONS
def test_ingest_exchange_routes_a_full_key_to_its_start_level(amqp, declared, version):
    v = declared(version).version
    ingest = cascade.ingest_exchange(v.prefix)
    for delay, level in ((10, 3), (5, 2), (1 << 27, 27), (3, 1)):
        send(amqp, v, delay, "nobody", exchange=ingest)
        assert get(amqp, cascade.level_name(v.prefix, level)) is not None, (delay, level)
    queue = bind_endpoint(amqp, v, v.prefix.replace(".", "") + "-zero")
    try:
        send(amqp, v, 0, queue, b"zero", exchange=ingest)
        message, _ = wait_get(amqp, queue, timeout=2)
        assert message is not None and message.body == b"zero"
    finally:
        amqp.delete_queue(queue)


def test_v3_publishing_to_the_top_level_passes_down_to_the_start_level(amqp, declared):
    """The producer need not compute where to start: level 27 passes the message down."""
    v = declared(cascade.V3).version
    for delay, level in ((10, 3), (1, 0), (1 << 26, 26)):
        send(amqp, v, delay, "nobody", exchange=cascade.level_name(v.prefix, 27))
        assert get(amqp, cascade.level_name(v.prefix, level)) is not None, (delay, level)


def test_v3_dotted_name_gets_its_messages_and_a_name_sharing_its_suffix_does_not(amqp, declared, unique_prefix):
    v = declared(cascade.V3).version
    tag = unique_prefix.replace(".", "")
    dotted, suffix = bind_endpoint(amqp, v, f"{tag}.orders.eu"), bind_endpoint(amqp, v, "orders.eu")
    try:
        for delay, body in ((0, b"now"), (1, b"after-1s")):
            send(amqp, v, delay, dotted, body)
            message, _ = wait_get(amqp, dotted, timeout=4)
            assert message is not None and message.body == body
            assert message.headers.get("CC", []) == list(cascade.cc_keys(delay))
        send(amqp, v, 1, suffix, b"for the suffix")
        message, _ = wait_get(amqp, suffix, timeout=4)
        assert message is not None and message.body == b"for the suffix"
        assert get(amqp, dotted) is None and get(amqp, suffix) is None
    finally:
        amqp.delete_queue(dotted)
        amqp.delete_queue(suffix)


@VERSIONS
def test_declaring_twice_changes_nothing_and_keeps_messages(amqp, declared, rabbit_vhost, version):
    plan = declared(version)
    v = plan.version
    management = broker().management
    before = snapshot(management, rabbit_vhost, v.prefix)
    assert tuple(len(part) for part in before) == COUNTS[v.name]
    send(amqp, v, 1 << 27, "x")
    assert amqp.declare(plan) == []
    assert snapshot(management, rabbit_vhost, v.prefix) == before
    assert amqp.queue_depth(cascade.level_name(v.prefix, 27)) == 1
    assert diff_plan(plan, *management.listings(rabbit_vhost)) == []


def test_every_version_side_by_side_reaches_the_same_endpoint(amqp, declared, unique_prefix):
    versions = [declared(v, prefix=f"{unique_prefix}{v.name}.").version for v in cascade.VERSIONS.values()]
    endpoint = unique_prefix.replace(".", "") + "-all"
    for v in versions:
        bind_endpoint(amqp, v, endpoint)
    try:
        for v in versions:
            send(amqp, v, 1, endpoint, v.name.encode())
        bodies = set()
        for _ in versions:
            message, _ = wait_get(amqp, endpoint, timeout=4)
            assert message is not None
            bodies.add(message.body)
        assert bodies == {b"v1", b"v2", b"v3"}
        management = broker().management
        for v in versions:
            assert diff_plan(cascade.cascade_plan(v), *management.listings(broker().vhost)) == []
    finally:
        amqp.delete_queue(endpoint)


def test_conflicting_queue_is_one_readable_error(amqp, declared, unique_prefix):
    declared(cascade.V2, levels=2)
    clash = cascade.cascade_plan(cascade.V1.with_(prefix=unique_prefix, levels=2))
    with pytest.raises(rabbit.TopologyConflict, match="inequivalent arg"):
        amqp.declare(clash)


def test_v3_over_a_v2_cascade_of_the_same_prefix_is_a_conflict_not_a_change(amqp, declared, unique_prefix,
                                                                              rabbit_vhost):
    plan = declared(cascade.V2, levels=2)
    before = snapshot(broker().management, rabbit_vhost, unique_prefix)
    with pytest.raises(rabbit.TopologyConflict, match="inequivalent arg"):
        amqp.declare(cascade.cascade_plan(cascade.V3.with_(prefix=unique_prefix, levels=2)))
    assert snapshot(broker().management, rabbit_vhost, unique_prefix) == before
    assert diff_plan(plan, *broker().management.listings(rabbit_vhost)) == []


def nservicebus_cascade(version: cascade.Version) -> cascade.Plan:
    """What NServiceBus declares (seeds 000/002): the levels and a delivery exchange without
    arguments, no ingest or unroutable exchange."""
    plan = cascade.cascade_plan(version)
    ours = {cascade.ingest_exchange(version.prefix), cascade.unroutable_name(version.prefix)}
    return cascade.Plan(
        version,
        tuple(cascade.Exchange(e.name, e.type) for e in plan.exchanges if e.name not in ours),
        tuple(q for q in plan.queues if q.name not in ours),
        tuple(b for b in plan.bindings if b.source not in ours),
    )


def test_provisioning_beside_nservicebus_keeps_its_cascade_as_it_is(amqp, unique_prefix, rabbit_vhost):
    """`provision_delays --prefix nsb.v2. --version v2` on a broker that holds NServiceBus's own
    cascade: the declaration succeeds, NServiceBus's exchanges and queues are untouched, and
    verify warns that the unroutable catch is gone."""
    version = cascade.V2.with_(prefix=f"{unique_prefix}nsb.v2.", levels=4)
    theirs = nservicebus_cascade(version)
    management = broker().management
    amqp.declare(theirs)
    try:
        before = snapshot(management, rabbit_vhost, version.prefix)
        (kept,) = amqp.declare(cascade.cascade_plan(version))
        assert f"{version.prefix}delay-delivery already exists without alternate-exchange" in kept
        after = snapshot(management, rabbit_vhost, version.prefix)
        assert before[0] <= after[0] and before[1] <= after[1] and before[2] <= after[2]  # nothing of theirs changed
        assert {e[0] for e in after[0] - before[0]} == {cascade.ingest_exchange(version.prefix),
                                                        cascade.unroutable_name(version.prefix)}
        plan = cascade.cascade_plan(version)
        exchanges, queues, bindings = management.listings(rabbit_vhost)
        assert diff_plan(plan, exchanges, queues, bindings) == []
        (warning,) = diff_warnings(plan, exchanges)
        assert "has no alternate-exchange" in warning
        queue = bind_endpoint(amqp, version, unique_prefix.replace(".", "") + "-nsb")
        send(amqp, version, 1, queue, b"through their cascade")
        message, _ = wait_get(amqp, queue, timeout=4)
        assert message is not None and message.body == b"through their cascade"
        amqp.delete_queue(queue)
    finally:
        amqp.teardown(cascade.cascade_plan(version))


def test_an_exchange_of_another_type_is_still_a_conflict(amqp, unique_prefix):
    version = cascade.V2.with_(prefix=unique_prefix, levels=2)
    amqp.declare(cascade.Plan(version, (cascade.Exchange(cascade.delivery_exchange(unique_prefix), "direct"),), (), ()))
    try:
        with pytest.raises(rabbit.TopologyConflict, match="inequivalent arg 'type'"):
            amqp.declare(cascade.cascade_plan(version))
    finally:
        amqp.teardown(cascade.cascade_plan(version))


@VERSIONS
def test_exported_definitions_import_into_a_complete_cascade(amqp, unique_prefix, rabbit_vhost, version):
    plan = cascade.cascade_plan(version.with_(prefix=unique_prefix))
    management = broker().management
    management.import_definitions(rabbit_vhost, plan_definitions(plan, rabbit_vhost))
    try:
        assert diff_plan(plan, *management.listings(rabbit_vhost)) == []
    finally:
        amqp.teardown(plan)
    # and teardown removed every piece again
    assert len(diff_plan(plan, *management.listings(rabbit_vhost))) == sum(COUNTS[version.name])

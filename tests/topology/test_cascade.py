"""The cascade's pure functions, pinned against the seeds (table-driven)."""

import pytest

from topology import cascade
from topology.cascade import V1, V2, V3

from .routing_model import walk

MAX = 268_435_455


@pytest.mark.parametrize(
    ("delay", "levels", "key", "start"),
    [
        (0, 28, "0." * 28 + "dest", None),
        (1, 28, "0." * 27 + "1.dest", 0),
        (2, 28, "0." * 26 + "1.0.dest", 1),
        (10, 4, "1.0.1.0.destination", 3),  # the seeds' example, 4 levels
        (10, 28, "0." * 24 + "1.0.1.0.destination", 3),  # the seeds' example, 28 levels
        (MAX - 1, 28, "1." * 27 + "0.dest", 27),
        (MAX, 28, "1." * 28 + "dest", 27),
        (15, 4, "1.1.1.1.dest", 3),
    ],
)
def test_routing_key_and_start_level(delay, levels, key, start):
    destination = key.rsplit(".", 1)[1]
    assert cascade.routing_key(delay, destination, levels) == key
    assert cascade.start_level(delay, levels) == start
    assert cascade.parse_routing_key(key, levels) == (delay, destination)


def test_seed_example_full_key_is_the_documented_one():
    assert (
        cascade.routing_key(10, "destination")
        == "0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.1.0.destination"
    )


@pytest.mark.parametrize(
    ("delay", "levels", "message"),
    [
        (MAX + 1, 28, "over the maximum of 268435455"),
        (-1, 28, "must not be negative"),
        (16, 4, "over the maximum of 15"),
        (1.5, 28, "whole number"),
        (True, 28, "whole number"),
    ],
)
def test_out_of_range_delays_are_clear_errors(delay, levels, message):
    with pytest.raises(ValueError, match=message):
        cascade.routing_key(delay, "dest", levels)
    with pytest.raises(ValueError, match=message):
        cascade.start_level(delay, levels)


def test_max_delay_is_about_eight_and_a_half_years():
    assert cascade.max_delay_units() == MAX == V2.max_delay_units
    assert 8.5 == pytest.approx(MAX / (365.25 * 86400), abs=0.01)


@pytest.mark.parametrize("bad", ["a.b", "a*", "#", "a b", "", "é", "a/b", "x" * 200])
def test_destinations_that_would_break_topic_matching_are_refused(bad):
    with pytest.raises(ValueError, match="destination"):
        cascade.routing_key(1, bad)


@pytest.mark.parametrize("good", ["billing", "Billing-2", "a_b", "x" * 199])
def test_routing_safe_destinations(good):
    assert cascade.routing_key(1, good).endswith("." + good)
    assert len(cascade.routing_key(1, good).encode()) <= 255


@pytest.mark.parametrize(
    ("version", "level", "name"),
    [(V2, 3, "dp.v2.delay-level-03"), (V1, 27, "dp.delay-level-27"), (V2.with_(prefix="nsb.v2."), 0, "nsb.v2.delay-level-00")],
)
def test_level_names_have_two_digits(version, level, name):
    assert cascade.level_name(version.prefix, level) == name


def test_first_exchange_is_highest_set_bit_or_delivery():
    assert cascade.first_exchange(V2, 10) == "dp.v2.delay-level-03"
    assert cascade.first_exchange(V2, 1) == "dp.v2.delay-level-00"
    assert cascade.first_exchange(V2, 0) == "dp.v2.delay-delivery"
    assert cascade.first_exchange(V1, MAX) == "dp.delay-level-27"


@pytest.mark.parametrize("version", [V1, V2, V2.with_(levels=4), V1.with_(prefix="x.", levels=7)])
def test_plan_invariants_for_every_level(version):
    plan = cascade.cascade_plan(version)
    n, p = version.levels, version.prefix
    queues = {q.name: q for q in plan.queues}
    exchanges = {e.name: e for e in plan.exchanges}
    bindings = set(plan.bindings)
    assert len(plan.queues) == n + 1  # one per level + unroutable
    assert len(plan.exchanges) == n + 3  # one per level + delivery, ingest, unroutable
    for level in range(n):
        name = f"{p}delay-level-{level:02d}"
        lower = f"{p}delay-level-{level - 1:02d}" if level else f"{p}delay-delivery"
        assert exchanges[name].type == "topic" and exchanges[name].durable
        args = queues[name].args
        assert queues[name].durable
        assert args["x-message-ttl"] == 2**level * 1000
        assert args["x-dead-letter-exchange"] == lower
        wildcards = "*." * (n - 1 - level)
        assert cascade.Binding(name, name, "queue", wildcards + "1.#") in bindings
        assert cascade.Binding(name, lower, "exchange", wildcards + "0.#") in bindings
        assert cascade.Binding(f"{p}delay-ingest", name, "exchange", "0." * (n - 1 - level) + "1.#") in bindings
    assert cascade.Binding(f"{p}delay-ingest", f"{p}delay-delivery", "exchange", "0." * n + "#") in bindings
    assert exchanges[f"{p}delay-delivery"].arguments == (("alternate-exchange", f"{p}delay-unroutable"),)
    assert exchanges[f"{p}delay-unroutable"].type == "fanout"
    assert cascade.Binding(f"{p}delay-unroutable", f"{p}delay-unroutable", "queue", "") in bindings
    assert len(bindings) == len(plan.bindings) == 2 * n + (n + 1) + 1


def test_versions_differ_only_in_queue_kind_and_dead_lettering():
    v1 = cascade.cascade_plan(V1).queues[0].args
    v2 = cascade.cascade_plan(V2).queues[0].args
    assert v1 == {"x-queue-mode": "lazy", "x-message-ttl": 2**27 * 1000, "x-dead-letter-exchange": "dp.delay-level-26"}
    assert v2 == {
        "x-queue-type": "quorum",
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-message-ttl": 2**27 * 1000,
        "x-dead-letter-exchange": "dp.v2.delay-level-26",
    }
    assert (V1.prefix, V2.prefix) == ("dp.", "dp.v2.")


def test_nsb_prefix_reproduces_the_documented_names():
    plan = cascade.cascade_plan(V2.with_(prefix="nsb.v2."))
    names = {e.name for e in plan.exchanges}
    assert {"nsb.v2.delay-level-27", "nsb.v2.delay-level-00", "nsb.v2.delay-delivery"} <= names
    # the seeds' diagram: level 1 binds with 26 wildcards, level 0 with 27
    assert cascade.Binding("nsb.v2.delay-level-01", "nsb.v2.delay-level-01", "queue", "*." * 26 + "1.#") in plan.bindings
    assert cascade.Binding("nsb.v2.delay-level-00", "nsb.v2.delay-delivery", "exchange", "*." * 27 + "0.#") in plan.bindings


@pytest.mark.parametrize("delay", [0, 1, 2, 10, 1000, 86_400, MAX - 1, MAX])
def test_path_spends_exactly_the_delay_in_queues_and_only_goes_down(delay):
    hops = cascade.path(V2, delay, "dest")
    assert cascade.path_ttl_ms(hops) == delay * 1000
    levels = [h.level for h in hops[:-1]]
    assert levels == sorted(levels, reverse=True) and len(set(levels)) == len(levels)
    assert hops[-1].exchange == "dp.v2.delay-delivery" and hops[-1].routed_to == "dest"


def test_levels_must_be_sane():
    for bad in (0, 65, "4"):
        with pytest.raises(ValueError, match="levels"):
            V2.with_(levels=bad)
    with pytest.raises(ValueError, match="unknown topology version 'v4'"):
        cascade.get_version("v4")


# --- v3: direct exchanges, alternate-exchange pass-down, CC bit keys ---------------------------


@pytest.mark.parametrize(
    ("delay", "levels", "exchange", "cc"),
    [
        (0, 28, "dp.v3.delay-delivery", ()),
        (1, 28, "dp.v3.delay-level-00", ("bit:00",)),
        (2, 28, "dp.v3.delay-level-01", ("bit:01",)),
        (10, 4, "dp.v3.delay-level-03", ("bit:03", "bit:01")),  # the seeds' example, 4 levels
        (37, 28, "dp.v3.delay-level-05", ("bit:05", "bit:02", "bit:00")),
        (MAX, 28, "dp.v3.delay-level-27", tuple(f"bit:{level:02d}" for level in range(27, -1, -1))),
    ],
)
def test_v3_route_is_the_destination_and_the_set_bits_as_cc_keys(delay, levels, exchange, cc):
    r = cascade.route(V3.with_(levels=levels), delay, "a.b")
    assert (r.delay_units, r.exchange, r.routing_key, r.cc) == (delay, exchange, "a.b", cc)
    assert r.headers == ({"CC": list(cc)} if cc else {})
    assert cascade.parse_cc_keys(cc, levels) == delay
    assert cascade.read_route(V3.with_(levels=levels), "a.b", list(cc)) == (delay, "a.b")


@pytest.mark.parametrize("bad", [["bit:28"], ["b05"], ["bit:5"], ["bit:-1"], [5], ["bit:05", "x"]])
def test_v3_keys_that_are_not_bit_keys_say_nothing(bad):
    with pytest.raises(ValueError):
        cascade.parse_cc_keys(bad, 28)
    assert cascade.read_route(V3, "dest", bad) == (None, None)


def test_v3_topic_and_direct_routes_agree_on_where_to_start():
    for delay in (0, 1, 5, 10, 3600, MAX):
        assert cascade.route(V3, delay, "d").exchange.replace("dp.v3.", "dp.v2.") == cascade.route(V2, delay, "d").exchange
        assert cascade.route(V2, delay, "d").cc == ()


@pytest.mark.parametrize("version", [V3, V3.with_(levels=4), V3.with_(prefix="x.", levels=7)])
def test_v3_plan_invariants_for_every_level(version):
    plan = cascade.cascade_plan(version)
    n, p = version.levels, version.prefix
    queues = {q.name: q for q in plan.queues}
    exchanges = {e.name: e for e in plan.exchanges}
    assert len(plan.queues) == n + 1 and len(plan.exchanges) == n + 3
    assert len(plan.bindings) == n + 1  # no exchange-to-exchange bindings at all
    for level in range(n):
        name = f"{p}delay-level-{level:02d}"
        lower = f"{p}delay-level-{level - 1:02d}" if level else f"{p}delay-delivery"
        assert exchanges[name].type == "direct"
        assert exchanges[name].arguments == (("alternate-exchange", lower),)
        assert queues[name].args == {**cascade.level_queue(V2.with_(prefix=p, levels=n), level).args}
        assert queues[name].args["x-dead-letter-exchange"] == lower
        assert cascade.Binding(name, name, "queue", f"bit:{level:02d}") in plan.bindings
    delivery, ingest = exchanges[f"{p}delay-delivery"], exchanges[f"{p}delay-ingest"]
    assert delivery.type == "direct" and delivery.arguments == (("alternate-exchange", f"{p}delay-unroutable"),)
    assert ingest.type == "direct" and ingest.arguments == (("alternate-exchange", f"{p}delay-level-{n - 1:02d}"),)
    assert cascade.Binding(f"{p}delay-unroutable", f"{p}delay-unroutable", "queue", "") in plan.bindings
    assert not any(e.may_exist_without_arguments for e in plan.exchanges)


def test_v1_and_v2_plans_are_unchanged_by_v3():
    """Byte for byte as before v3 (NServiceBus compatibility): topic exchanges only, the same
    counts, and only the delivery exchange may be kept as another system declared it."""
    for version in (V1, V2):
        plan = cascade.cascade_plan(version)
        assert {e.type for e in plan.exchanges} == {"topic", "fanout"}
        assert [e.name for e in plan.exchanges if e.may_exist_without_arguments] == [f"{version.prefix}delay-delivery"]
        assert all(not q.args.get("x-queue-type") == "direct" for q in plan.queues)


@pytest.mark.parametrize("version", [V1, V2, V3], ids=["v1", "v2", "v3"])
@pytest.mark.parametrize("delay", [0, 1, 2, 3, 10, 37, 255, 3600, 86_400, 1_000_003, MAX - 1, MAX])
def test_the_plan_carries_every_delay_to_its_destination_in_exactly_that_time(version, delay):
    """Walk the plan as RabbitMQ would route it (routing_model): from the first exchange, and
    from the ingest exchange, the message waits exactly ``delay`` units and ends in its queue."""
    plan = cascade.cascade_plan(version)
    r = cascade.route(version, delay, "dest")
    endpoint = [cascade.endpoint_binding(version, "dest")]
    endpoint = [(b.source, b.destination, b.routing_key) for b in endpoint]
    for start in (r.exchange, cascade.ingest_exchange(version.prefix)):
        w = walk(plan, start, r.routing_key, r.cc, endpoint_queues=endpoint)
        assert w.ended_in == {"dest"}, (start, w)
        assert w.waited_ms == delay * 1000
        assert [q for q, _ in w.waited] == [cascade.level_name(version.prefix, lv) for lv in cascade.set_levels(delay)]


def test_v3_a_dotted_name_is_not_caught_by_a_name_that_shares_its_suffix():
    plan = cascade.cascade_plan(V3)
    bound = [(b.source, b.destination, b.routing_key) for name in ("a.b", "b", "x.a.b")
             for b in [cascade.endpoint_binding(V3, name)]]
    for name in ("a.b", "b", "x.a.b"):
        r = cascade.route(V3, 5, name)
        assert walk(plan, r.exchange, r.routing_key, r.cc, endpoint_queues=bound).ended_in == {name}


def test_v3_unbound_destination_ends_in_the_unroutable_queue():
    plan = cascade.cascade_plan(V3)
    r = cascade.route(V3, 3, "ghost")
    assert walk(plan, r.exchange, r.routing_key, r.cc).ended_in == {"dp.v3.delay-unroutable"}


@pytest.mark.parametrize("name", ["a.b", "orders.eu-west.v2", "x_y.z"])
def test_dotted_names_travel_on_v3_only(name):
    assert cascade.check_destination(name) == name == cascade.check_destination(name, V3)
    assert cascade.carries(V3, name) and not cascade.carries(V2, name) and not cascade.carries(V1, name)
    assert cascade.endpoint_binding_key(V3, name) == name
    with pytest.raises(ValueError, match="has dots: v2 routes by topic keys"):
        cascade.endpoint_binding_key(V2, name)


@pytest.mark.parametrize("name", ["b05", "bit", "b", "billing", "celery", "x" * 100])
def test_plain_names_are_carried_by_every_version(name):
    for version in (V1, V2, V3):
        assert cascade.carries(version, name)
    assert cascade.endpoint_binding_key(V2, name) == f"#.{name}" and cascade.endpoint_binding_key(V3, name) == name


@pytest.mark.parametrize("bad", ["a..b", ".a", "a.", "a*", "#", "a b", "", "é", "bit:05", "x" * 256])
def test_names_no_version_can_carry_are_refused(bad):
    with pytest.raises(ValueError, match="destination"):
        cascade.check_destination(bad, V3)
    assert not cascade.carries(V3, bad)


def test_no_endpoint_name_can_equal_a_bit_key():
    assert not any(cascade.DOTTED_DESTINATION_RE.match(cascade.bit_key(level)) for level in range(64))


@pytest.mark.parametrize("delay", [0, 1, 10, 1000, MAX])
def test_v3_path_holds_exactly_at_the_set_bits(delay):
    hops = cascade.path(V3, delay, "a.b")
    assert cascade.path_ttl_ms(hops) == delay * 1000
    assert [h.level for h in hops if h.matched and h.level is not None] == cascade.set_levels(delay)
    assert all(h.value == cascade.bit_key(h.level) for h in hops[:-1])
    assert hops[-1].exchange == "dp.v3.delay-delivery" and hops[-1].routed_to == "a.b"

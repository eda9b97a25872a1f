"""Properties of the pure cascade functions for any delay (hypothesis): the path spends exactly
the delay in queues, every hop goes strictly down, the key (topic) or the CC keys (direct) say
exactly the delay and parse back, and the plan itself, walked as RabbitMQ routes, carries any
delay to its destination in exactly that time."""

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.topology.routing_model import walk
from topology import cascade

NAMES = st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True)
DOTTED = st.from_regex(r"[A-Za-z0-9_-]{1,10}(\.[A-Za-z0-9_-]{1,10}){0,3}", fullmatch=True)


@st.composite
def version_and_delay(draw):
    levels = draw(st.integers(min_value=1, max_value=40))
    version = draw(st.sampled_from([cascade.V1, cascade.V2, cascade.V3])).with_(levels=levels)
    delay = draw(st.one_of(st.integers(0, cascade.max_delay_units(levels)), st.sampled_from([0, cascade.max_delay_units(levels)])))
    return version, delay


@settings(max_examples=2000, deadline=None)
@given(version_and_delay(), NAMES)
def test_path_spends_exactly_the_delay_and_only_goes_down(case, destination):
    version, delay = case
    hops = cascade.path(version, delay, destination)
    assert cascade.path_ttl_ms(hops) == delay * version.unit_ms
    levels = [hop.level for hop in hops[:-1]]
    assert all(a > b for a, b in zip(levels, levels[1:]))
    assert hops[-1].exchange == cascade.delivery_exchange(version.prefix) and hops[-1].routed_to == destination
    queued = [hop.level for hop in hops if hop.ttl_ms]
    assert queued == [level for level in range(version.levels - 1, -1, -1) if delay >> level & 1]


@settings(max_examples=2000, deadline=None)
@given(version_and_delay(), NAMES)
def test_key_has_exactly_n_bits_and_parses_back(case, destination):
    version, delay = case
    assume(version.routing == cascade.TOPIC)  # direct versions: test_the_route_reads_back_…
    key = cascade.routing_key(delay, destination, version.levels)
    words = key.split(".")
    assert len(words) == version.levels + 1 and set(words[:-1]) <= {"0", "1"}
    assert cascade.parse_routing_key(key, version.levels) == (delay, destination)
    start = cascade.start_level(delay, version.levels)
    assert cascade.first_exchange(version, delay) == (
        cascade.delivery_exchange(version.prefix) if start is None else cascade.level_name(version.prefix, start))


@given(st.integers(max_value=-1) | st.integers(min_value=cascade.max_delay_units() + 1))
def test_any_delay_outside_the_range_is_refused(delay):
    with pytest.raises(ValueError, match="negative|maximum"):
        cascade.routing_key(delay, "x")


@given(st.text(min_size=1, max_size=30).filter(lambda s: not cascade.DESTINATION_RE.match(s)))
def test_any_name_that_could_change_topic_matching_is_refused(name):
    with pytest.raises(ValueError, match="letters, digits|has dots"):
        cascade.routing_key(1, name)


@settings(max_examples=500, deadline=None)
@given(version_and_delay(), NAMES)
def test_the_route_reads_back_to_the_same_delay_and_destination(case, destination):
    version, delay = case
    r = cascade.route(version, delay, destination)
    assert cascade.read_route(version, r.routing_key, list(r.cc)) == (delay, destination)
    assert len(r.cc) == (bin(delay).count("1") if version.routing == cascade.DIRECT else 0)


@settings(max_examples=300, deadline=None)
@given(version_and_delay(), NAMES, st.booleans())
def test_the_plan_carries_any_delay_to_its_destination_in_exactly_that_time(case, destination, via_ingest):
    version, delay = case
    plan, r = cascade.cascade_plan(version), cascade.route(version, delay, destination)
    binding = cascade.endpoint_binding(version, destination)
    start = cascade.ingest_exchange(version.prefix) if via_ingest else r.exchange
    w = walk(plan, start, r.routing_key, r.cc, endpoint_queues=[(binding.source, destination, binding.routing_key)])
    assert w.ended_in == {destination} and w.waited_ms == delay * version.unit_ms


@settings(max_examples=300, deadline=None)
@given(DOTTED, DOTTED)
def test_on_v3_a_name_only_ever_receives_its_own_messages(one, other):
    """Any two dotted names, one perhaps a suffix of the other: each gets only its own."""
    plan = cascade.cascade_plan(cascade.V3.with_(levels=3))
    names = {one, other}
    bound = [(b.source, b.destination, b.routing_key) for n in names for b in [cascade.endpoint_binding(plan.version, n)]]
    for name in names:
        r = cascade.route(plan.version, 5, name)
        assert walk(plan, r.exchange, r.routing_key, r.cc, endpoint_queues=bound).ended_in == {name}

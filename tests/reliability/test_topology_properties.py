"""Properties of the pure cascade functions for any delay (hypothesis): the path spends exactly
the delay in queues, every hop goes strictly down, the key has exactly N bits, and it parses
back to the same delay and destination."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import cascade

pytestmark = pytest.mark.reliability
NAMES = st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True)


@st.composite
def version_and_delay(draw):
    levels = draw(st.integers(min_value=1, max_value=40))
    version = draw(st.sampled_from([cascade.V1, cascade.V2])).with_(levels=levels)
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
    with pytest.raises(ValueError, match="letters, digits"):
        cascade.routing_key(1, name)

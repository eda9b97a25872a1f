"""Sharded cascades as pure data: k parallel cascades of one version. Shard 0 keeps today's names
(a version of one shard is byte for byte the cascade without shards), shard s >= 1 its own
suffixed levels and ingest exchange; delivery and unroutable are shared. Table-driven pins, then
hypothesis properties walked through the routing model."""

import hashlib
import json
import os
import subprocess
import sys
import uuid
import zlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.paths import ROOT
from topology import cascade, explain
from topology.cascade import V1, V2, V3
from topology.definitions import plan_definitions
from topology.diff import Leftover, diff_plan, leftover_shards, leftover_warning, replication_check

from .routing_model import walk

# sha256 of the definitions JSON of each built-in version before shards existed
UNSHARDED = {
    "v1": "d04ead6f2be13e71f28d1a712722c78d516971e0fec5b418cc5ab1b87943a623",
    "v2": "16f0b4a171d849aeb76e2744e6b824a71ab2ba77e177f2c00ed13662a4cd0acb",
    "v3": "0e9874bb2cd1bced338494d382660d6c48782e4b8f87706ac56e22a88164121a",
}
ALL = pytest.mark.parametrize("version", [V1, V2, V3], ids=["v1", "v2", "v3"])


def digest(plan) -> str:
    return hashlib.sha256(json.dumps(plan_definitions(plan)).encode()).hexdigest()


@ALL
def test_one_shard_is_byte_for_byte_the_cascade_without_shards(version):
    assert version.shards == 1
    assert digest(cascade.cascade_plan(version)) == UNSHARDED[version.name]
    assert cascade.shard_plans(version) == [cascade.cascade_plan(version)] == [cascade.shard_plan(version, 0)]
    sharded = version.with_(shards=3)
    assert digest(cascade.shard_plan(sharded, 0)) == UNSHARDED[version.name]  # shard 0 keeps every name


@pytest.mark.parametrize(
    ("function", "args", "name"),
    [
        (cascade.level_name, ("dp.v3.", 5, 0), "dp.v3.delay-level-05"),
        (cascade.level_name, ("dp.v3.", 5, 2), "dp.v3.delay-level-05-s2"),
        (cascade.level_name, ("dp.v2.", 27, 13), "dp.v2.delay-level-27-s13"),
        (cascade.ingest_exchange, ("dp.v3.", 0), "dp.v3.delay-ingest"),
        (cascade.ingest_exchange, ("dp.v3.", 2), "dp.v3.delay-ingest-s2"),
        (cascade.next_exchange, (V3.with_(shards=4), 5, 2), "dp.v3.delay-level-04-s2"),
        (cascade.next_exchange, (V3.with_(shards=4), 0, 2), "dp.v3.delay-delivery"),  # shared
        (cascade.first_exchange, (V2.with_(shards=2), 10, 1), "dp.v2.delay-level-03-s1"),
        (cascade.first_exchange, (V2.with_(shards=2), 0, 1), "dp.v2.delay-delivery"),
    ],
)
def test_shard_names(function, args, name):
    assert function(*args) == name


@pytest.mark.parametrize(
    ("prefix", "name", "level", "shard"),
    [
        ("dp.v3.", "dp.v3.delay-level-05", (5, 0), 0),
        ("dp.v3.", "dp.v3.delay-level-05-s2", (5, 2), 2),
        ("dp.v3.", "dp.v3.delay-ingest-s7", None, 7),
        ("dp.v3.", "dp.v3.delay-ingest", None, 0),
        ("dp.v3.", "dp.v3.delay-delivery", None, None),  # shared: no shard
        ("dp.v3.", "dp.v3.delay-unroutable", None, None),
        ("dp.", "dp.v2.delay-level-05", None, None),  # v1's prefix is the start of v2's
        ("dp.", "dp.delay-level-05-s0", None, None),  # shard 0 has no suffix
        ("dp.", "dp.delay-level-5", None, None),
        ("dp.v3.", "dp.v3.delay-level-05-s2x", None, None),
    ],
)
def test_names_parse_back_to_level_and_shard(prefix, name, level, shard):
    assert cascade.parse_level_name(prefix, name) == level
    assert cascade.shard_of_name(prefix, name) == shard


EXAMPLE = "6f1c2a4e-8d3b-4b7a-9c1e-2f5d8a7b3c90"


@pytest.mark.parametrize(
    ("message_id", "shards", "shard"),
    [
        ("00000000-0000-0000-0000-00000000000b", 4, 11 % 4),
        ("00000000-0000-0000-0000-00000000000B", 4, 11 % 4),  # any spelling of the UUID
        ("000000000000000000000000000000ff", 7, 255 % 7),
        (uuid.UUID("00000000-0000-0000-0000-0000000000ff"), 7, 255 % 7),
        (EXAMPLE, 2, uuid.UUID(EXAMPLE).int % 2),
        (EXAMPLE, 64, uuid.UUID(EXAMPLE).int % 64),
        ("task-42", 3, zlib.crc32(b"task-42") % 3),  # not a UUID: crc32 of the text
        (b"task-42", 3, zlib.crc32(b"task-42") % 3),
        (None, 5, 0),
        (EXAMPLE, 1, 0),
    ],
)
def test_shard_of_a_message_id(message_id, shards, shard):
    assert cascade.shard_of(message_id, shards) == shard


def test_shard_of_is_the_same_in_another_process_with_another_hash_seed():
    ids = [EXAMPLE, "task-42", "m0", str(uuid.UUID(int=2**127 + 12345))]
    ours = [cascade.shard_of(i, k) for i in ids for k in (2, 3, 5, 64)]
    program = (f"import json; from topology.cascade import shard_of; "
               f"print(json.dumps([shard_of(i, k) for i in {ids!r} for k in (2, 3, 5, 64)]))")
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=30,
                             env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout
        assert json.loads(out) == ours


def test_random_ids_spread_evenly_over_the_shards():
    rng = __import__("random").Random(7)
    counts = Counter(cascade.shard_of(str(uuid.UUID(int=rng.getrandbits(128), version=4)), 4) for _ in range(8000))
    assert set(counts) == {0, 1, 2, 3} and all(1800 <= n <= 2200 for n in counts.values()), counts


@pytest.mark.parametrize("bad", [0, 65, "2", True, 1.5])
def test_shard_counts_must_be_sane(bad):
    with pytest.raises(ValueError, match="shards must be a whole number from 1 to 64"):
        V3.with_(shards=bad)
    with pytest.raises(ValueError, match="shards must be"):
        cascade.shard_of(EXAMPLE, bad)


@pytest.mark.parametrize("shard", [-1, 2, True])
def test_a_shard_the_version_does_not_have_is_refused(shard):
    version = V3.with_(shards=2)
    with pytest.raises(ValueError, match="v3 has 2 shard"):
        cascade.route(version, 10, "dest", shard)
    with pytest.raises(ValueError, match="v3 has 2 shard"):
        cascade.shard_plan(version, shard)


@pytest.mark.parametrize(("version", "per_level_bindings"), [(V2, 3), (V3, 1)], ids=["topic", "direct"])
def test_counts_of_a_four_shard_plan(version, per_level_bindings):
    n, k = version.levels, 4
    plan = cascade.cascade_plan(version.with_(shards=k))
    one = cascade.cascade_plan(version)
    assert len(plan.queues) == len(one.queues) + (k - 1) * n  # levels only: unroutable is shared
    assert len(plan.exchanges) == len(one.exchanges) + (k - 1) * (n + 1)  # levels + ingest
    extra_bindings = (k - 1) * (per_level_bindings * n + (1 if version.routing == cascade.TOPIC else 0))
    assert len(plan.bindings) == len(one.bindings) + extra_bindings
    assert cascade.shard_plans(version.with_(shards=k))[0] == cascade.shard_plan(version.with_(shards=k), 0)


@ALL
def test_only_shard_zero_holds_what_the_shards_share(version):
    version = version.with_(shards=3, levels=4)
    shared = {cascade.delivery_exchange(version.prefix), cascade.unroutable_name(version.prefix)}
    zero, *others = cascade.shard_plans(version)
    assert shared <= {e.name for e in zero.exchanges} and cascade.unroutable_name(version.prefix) in {
        q.name for q in zero.queues}
    for shard, plan in enumerate(others, start=1):
        names = {e.name for e in plan.exchanges} | {q.name for q in plan.queues}
        assert not names & shared
        assert {cascade.shard_of_name(version.prefix, name) for name in names} == {shard}
        queues = {q.name: q.args for q in plan.queues}
        assert queues[cascade.level_name(version.prefix, 0, shard)]["x-dead-letter-exchange"] == \
            cascade.delivery_exchange(version.prefix)
        assert queues[cascade.level_name(version.prefix, 3, shard)]["x-dead-letter-exchange"] == \
            cascade.level_name(version.prefix, 2, shard)
        if version.routing == cascade.DIRECT:
            ingest = next(e for e in plan.exchanges if e.name == cascade.ingest_exchange(version.prefix, shard))
            assert dict(ingest.arguments) == {"alternate-exchange": cascade.level_name(version.prefix, 3, shard)}


@st.composite
def sharded(draw):
    levels = draw(st.integers(min_value=1, max_value=12))
    shards = draw(st.integers(min_value=1, max_value=6))
    prefix = draw(st.sampled_from(["dp.", "dp.v2.", "dp.v3.", "nsb.v2."]))
    version = draw(st.sampled_from([V1, V2, V3])).with_(prefix=prefix, levels=levels, shards=shards)
    delay = draw(st.integers(0, cascade.max_delay_units(levels)))
    shard = draw(st.integers(0, shards - 1))
    return version, delay, shard


@settings(max_examples=300, deadline=None)
@given(sharded())
def test_every_shard_carries_a_delay_to_the_shared_delivery_exchange_in_exactly_that_time(case):
    """Walked through the whole plan of every shard, as RabbitMQ routes: from the shard's first
    exchange and from its ingest exchange the message waits exactly the delay, only in its own
    shard's queues, and ends in the endpoint queue bound once on the shared delivery exchange."""
    version, delay, shard = case
    plan = cascade.cascade_plan(version)
    r = cascade.route(version, delay, "dest", shard)
    endpoint = [(b.source, b.destination, b.routing_key) for b in [cascade.endpoint_binding(version, "dest")]]
    for start in (r.exchange, cascade.ingest_exchange(version.prefix, shard)):
        w = walk(plan, start, r.routing_key, r.cc, endpoint_queues=endpoint)
        assert w.ended_in == {"dest"}, (start, w)
        assert w.waited_ms == delay * version.unit_ms
        assert [q for q, _ in w.waited] == [cascade.level_name(version.prefix, level, shard)
                                            for level in cascade.set_levels(delay, version.levels)]
        assert cascade.delivery_exchange(version.prefix) in w.exchanges_seen
    hops = cascade.path(version, delay, "dest", shard)
    assert cascade.path_ttl_ms(hops) == delay * version.unit_ms
    assert {cascade.shard_of_name(version.prefix, h.exchange) for h in hops[:-1]} <= {shard}


@settings(max_examples=200, deadline=None)
@given(sharded())
def test_names_are_unique_across_shards_and_all_start_with_the_prefix(case):
    version = case[0]
    plan = cascade.cascade_plan(version)
    exchanges, queues = [e.name for e in plan.exchanges], [q.name for q in plan.queues]
    assert len(set(exchanges)) == len(exchanges) and len(set(queues)) == len(queues)
    assert len(set(plan.bindings)) == len(plan.bindings)
    assert all(name.startswith(version.prefix) for name in exchanges + queues)
    assert len(queues) == version.shards * version.levels + 1
    shards = Counter(cascade.shard_of_name(version.prefix, q) for q in queues)
    assert shards == {**{s: version.levels for s in range(version.shards)}, None: 1}
    assert plan.exchanges == tuple(e for p in cascade.shard_plans(version) for e in p.exchanges)


# --- explain, on a shard -----------------------------------------------------------------------


def test_explain_names_the_shard_and_its_queues():
    version = V3.with_(levels=4, shards=3)
    rows = explain.explain_rows(version, 10, "a.b", 2)
    assert [row[0] for row in rows] == ["Level 03, shard 2", "Level 02, shard 2", "Level 01, shard 2",
                                        "Level 00, shard 2", "Delivery Exchange"]
    assert rows[0][2:] == ("Level 03, shard 2 Queue", "CC has `bit:03`", "8 seconds", "Level 02, shard 2 Exchange")
    assert explain.describe_route(version, 10, "a.b", 2) == \
        "published to dp.v3.delay-level-03-s2 with routing key a.b and CC bit:03, bit:01"
    assert explain.describe_queues(version, 10, "a.b", 2) == (
        "waits in dp.v3.delay-level-03-s2 (8 seconds), dp.v3.delay-level-01-s2 (2 seconds), 10 seconds in all; "
        "then dp.v3.delay-delivery -> a.b")
    assert explain.describe_queues(version, 0, "a.b") == "no queue; straight to dp.v3.delay-delivery -> a.b"
    assert explain.explain_rows(version, 10, "a.b", 0) == explain.explain_rows(V3.with_(levels=4), 10, "a.b")


# --- verify's pure parts: shards left behind, replication ---------------------------------------


def listings(plan, messages=0):
    d = plan_definitions(plan)
    queues = [{**q, "messages": messages} for q in d["queues"]]
    return d["exchanges"], queues, d["bindings"]


def test_shards_left_after_lowering_the_count_are_found_with_their_messages():
    before = V3.with_(levels=4, shards=4)
    exchanges, queues, bindings = listings(cascade.cascade_plan(before), messages=2)
    queues[-1]["messages"] = None  # the broker has not counted this one yet
    after = before.with_(shards=2)
    assert diff_plan(cascade.cascade_plan(after), exchanges, queues, bindings) == []
    left = leftover_shards(after, exchanges, queues)
    assert left == [Leftover(2, queues=4, exchanges=5, messages=8, uncounted=0),
                    Leftover(3, queues=4, exchanges=5, messages=6, uncounted=1)]
    assert leftover_shards(before, exchanges, queues) == []
    warning = leftover_warning(after, left[0])
    assert warning.startswith("shard 2 is beyond the 2 shard(s) configured and still exists (4 queue(s), "
                              "5 exchange(s) named *-s2) holding 8 message(s)")
    assert "still dead-letter into dp.v3.delay-delivery, so nothing is lost" in warning
    assert "not deleted automatically" in warning
    assert "holding at least 6 message(s) (1 queue(s) not counted yet)" in leftover_warning(after, left[1])
    fresh = Leftover(2, queues=4, exchanges=5, messages=0, uncounted=4)  # just declared: no statistics yet
    assert "holding messages the broker has not counted yet" in leftover_warning(after, fresh)


def test_leftover_shards_ignore_other_versions_sharing_the_start_of_the_prefix():
    v2 = cascade.cascade_plan(V2.with_(levels=3, shards=3))
    exchanges, queues, _ = listings(v2)
    assert leftover_shards(V1.with_(levels=3), exchanges, queues) == []


NODES = ["dpc1@localhost", "dpc2@localhost", "dpc3@localhost"]


def quorum_details(plan, members=NODES, online=None):
    """The management API's queue JSON for every quorum queue, leaders placed round-robin."""
    return {q.name: {"name": q.name, "type": "quorum", "members": list(members), "online": list(online or members),
                     "leader": members[i % len(members)]} for i, q in enumerate(plan.queues)}


def test_replication_on_three_nodes_counts_leaders_per_node():
    plan = cascade.cascade_plan(V3)  # 28 levels + unroutable
    result = replication_check(plan, quorum_details(plan), NODES)
    assert result.problems == [] and result.checked == 29
    assert result.summary == "quorum leaders: dpc1@localhost 10, dpc2@localhost 10, dpc3@localhost 9"


def test_a_queue_short_of_a_running_node_is_an_error_naming_it_and_its_members():
    plan = cascade.cascade_plan(V3.with_(levels=2, shards=2))
    details = quorum_details(plan)
    details["dp.v3.delay-level-01-s1"].update(members=NODES[:1], leader=NODES[0])
    details["dp.v3.delay-unroutable"].update(leader=None, online=[])
    result = replication_check(plan, details, NODES)
    assert result.problems == [  # in the plan's order: shard 0 (with the unroutable queue) first
        "quorum queue dp.v3.delay-unroutable has no leader (members dpc1@localhost, dpc2@localhost, "
        "dpc3@localhost; online none)",
        "quorum queue dp.v3.delay-level-01-s1 has 1 member(s) (dpc1@localhost) for 3 running node(s): "
        "not replicated to dpc2@localhost, dpc3@localhost",
    ]
    assert sum(result.leaders.values()) == 4


def test_a_stopped_node_is_not_asked_for_and_a_single_node_passes_trivially():
    plan = cascade.cascade_plan(V2.with_(levels=3))
    assert replication_check(plan, quorum_details(plan), NODES[:2]).problems == []  # dpc3 down: still 3 members
    single = replication_check(plan, quorum_details(plan, members=["rabbit@localhost"]), ["rabbit@localhost"])
    assert single.problems == [] and single.summary == "quorum leaders: rabbit@localhost 4"


def test_classic_cascades_and_missing_queues_have_nothing_to_replicate():
    v1 = cascade.cascade_plan(V1.with_(levels=3))
    result = replication_check(v1, quorum_details(v1), NODES)
    assert result.problems == [] and result.checked == 0
    assert result.summary == "quorum leaders: none (no quorum queues in this cascade)"
    v3 = cascade.cascade_plan(V3.with_(levels=3))
    assert replication_check(v3, {}, NODES).problems == []  # missing queues: diff_plan reports them

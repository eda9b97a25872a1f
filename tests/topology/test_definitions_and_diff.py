"""Definitions export and the verify diff, both pure."""

import json

from topology.cascade import V1, V2, V3, cascade_plan
from topology.definitions import plan_definitions
from topology.diff import diff_plan, diff_warnings


def _listings(plan):
    d = plan_definitions(plan, "v")
    return d["exchanges"], d["queues"], d["bindings"]


def test_definitions_hold_every_piece_and_are_json():
    plan = cascade_plan(V2)
    d = json.loads(json.dumps(plan_definitions(plan, "prod")))
    assert len(d["exchanges"]) == 31 and len(d["queues"]) == 29 and len(d["bindings"]) == 86
    q27 = next(q for q in d["queues"] if q["name"] == "dp.v2.delay-level-27")
    assert q27["arguments"]["x-message-ttl"] == 134217728000 and q27["vhost"] == "prod"


def test_complete_listing_has_no_problems():
    plan = cascade_plan(V1)
    assert diff_plan(plan, *_listings(plan)) == []


def _as_rabbitmq_4_lists_them(queues):
    """RabbitMQ 4's management API: a classic queue declared without a type lists x-queue-type."""
    return [{**q, "arguments": {"x-queue-type": "classic", **q["arguments"]}} for q in queues]


def test_rabbitmq_4s_listing_of_classic_queues_is_as_planned():
    """v1's queues are classic, declared without x-queue-type (3.x's equivalence check refuses a
    redeclaration that adds it): 4.x listing the type it implies is no difference."""
    plan = cascade_plan(V1)
    exchanges, queues, bindings = _listings(plan)
    assert diff_plan(plan, exchanges, _as_rabbitmq_4_lists_them(queues), bindings) == []


def test_another_queue_type_than_the_one_implied_is_still_named():
    plan = cascade_plan(V1.with_(levels=2))
    exchanges, queues, bindings = _listings(plan)
    queues[0] = {**queues[0], "arguments": {**queues[0]["arguments"], "x-queue-type": "quorum"}}
    assert diff_plan(plan, exchanges, queues, bindings) == [
        f"queue {queues[0]['name']}: unexpected argument x-queue-type='quorum'"]
    v2 = cascade_plan(V2.with_(levels=2))  # quorum, declared so: classic is no match
    exchanges, queues, bindings = _listings(v2)
    listed = [{**q, "arguments": {**q["arguments"], "x-queue-type": "classic"}} for q in queues]
    assert len(diff_plan(v2, exchanges, listed, bindings)) == len(queues)


def test_each_missing_or_mismatched_piece_is_named():
    plan = cascade_plan(V2.with_(levels=4))
    exchanges, queues, bindings = _listings(plan)
    queues = [q for q in queues if q["name"] != "dp.v2.delay-level-02"]
    queues[0] = {**queues[0], "arguments": {**queues[0]["arguments"], "x-message-ttl": 1}}
    bindings = bindings[1:]
    exchanges = [e for e in exchanges if e["name"] != "dp.v2.delay-ingest"]
    problems = diff_plan(plan, exchanges, queues, bindings)
    assert "missing queue dp.v2.delay-level-02" in problems
    assert "queue dp.v2.delay-level-03: argument x-message-ttl is 1, expected 8000" in problems
    assert "missing exchange dp.v2.delay-ingest" in problems
    assert "missing binding dp.v2.delay-level-03 -> queue dp.v2.delay-level-03 with key '1.#'" in problems
    assert len(problems) == 4


def test_v3_definitions_hold_direct_exchanges_with_alternate_exchanges():
    d = plan_definitions(cascade_plan(V3), "prod")
    assert len(d["exchanges"]) == 31 and len(d["queues"]) == 29 and len(d["bindings"]) == 29
    level5 = next(e for e in d["exchanges"] if e["name"] == "dp.v3.delay-level-05")
    assert level5["type"] == "direct" and level5["arguments"] == {"alternate-exchange": "dp.v3.delay-level-04"}
    assert diff_plan(cascade_plan(V3), *_listings(cascade_plan(V3))) == []


def test_a_delivery_exchange_without_alternate_exchange_is_a_warning_not_a_problem():
    """A cascade shared with NServiceBus: its delivery exchange has no arguments."""
    plan = cascade_plan(V2.with_(prefix="nsb.v2."))
    exchanges, queues, bindings = _listings(plan)
    exchanges = [{**e, "arguments": {}} if e["name"] == "nsb.v2.delay-delivery" else e for e in exchanges]
    assert diff_plan(plan, exchanges, queues, bindings) == []
    (warning,) = diff_warnings(plan, exchanges)
    assert "nsb.v2.delay-delivery has no alternate-exchange" in warning and "nsb.v2.delay-unroutable" in warning
    assert diff_warnings(plan, _listings(plan)[0]) == []


def test_another_alternate_exchange_or_type_is_still_a_problem():
    plan = cascade_plan(V2)
    exchanges, queues, bindings = _listings(plan)
    changed = [{**e, "arguments": {"alternate-exchange": "elsewhere"}} if e["name"] == "dp.v2.delay-delivery" else e
               for e in exchanges]
    assert diff_plan(plan, changed, queues, bindings) == [
        "exchange dp.v2.delay-delivery: argument alternate-exchange is 'elsewhere', expected 'dp.v2.delay-unroutable'"
    ]
    v3 = cascade_plan(V3)
    exchanges, queues, bindings = _listings(v3)
    bare = [{**e, "arguments": {}} if e["name"] == "dp.v3.delay-delivery" else e for e in exchanges]
    assert diff_plan(v3, bare, queues, bindings) == [
        "exchange dp.v3.delay-delivery: argument alternate-exchange missing (expected 'dp.v3.delay-unroutable')"
    ]

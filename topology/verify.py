"""Compare a plan with what the broker has: each missing or mismatched piece as one line."""

from __future__ import annotations

from .cascade import Plan
from .management import Management


def _args_diff(kind: str, name: str, expected: dict, actual: dict) -> list[str]:
    problems = []
    for key, value in sorted(expected.items()):
        if key not in actual:
            problems.append(f"{kind} {name}: argument {key} missing (expected {value!r})")
        elif actual[key] != value:
            problems.append(f"{kind} {name}: argument {key} is {actual[key]!r}, expected {value!r}")
    for key in sorted(set(actual) - set(expected)):
        problems.append(f"{kind} {name}: unexpected argument {key}={actual[key]!r}")
    return problems


def diff_plan(plan: Plan, exchanges: list[dict], queues: list[dict], bindings: list[dict]) -> list[str]:
    """Pure: the management API's listings of one vhost against the plan."""
    problems: list[str] = []
    have_exchanges = {e["name"]: e for e in exchanges}
    for e in plan.exchanges:
        actual = have_exchanges.get(e.name)
        if actual is None:
            problems.append(f"missing exchange {e.name}")
            continue
        if actual.get("type") != e.type:
            problems.append(f"exchange {e.name}: type is {actual.get('type')}, expected {e.type}")
        if actual.get("durable") != e.durable:
            problems.append(f"exchange {e.name}: durable is {actual.get('durable')}, expected {e.durable}")
        problems += _args_diff("exchange", e.name, dict(e.arguments), actual.get("arguments") or {})
    have_queues = {q["name"]: q for q in queues}
    for q in plan.queues:
        actual = have_queues.get(q.name)
        if actual is None:
            problems.append(f"missing queue {q.name}")
            continue
        if actual.get("durable") != q.durable:
            problems.append(f"queue {q.name}: durable is {actual.get('durable')}, expected {q.durable}")
        problems += _args_diff("queue", q.name, q.args, actual.get("arguments") or {})
    have_bindings = {
        (b["source"], b["destination"], b["destination_type"], b["routing_key"]) for b in bindings
    }
    for b in plan.bindings:
        if (b.source, b.destination, b.destination_type, b.routing_key) not in have_bindings:
            problems.append(
                f"missing binding {b.source} -> {b.destination_type} {b.destination} "
                f"with key {b.routing_key!r}"
            )
    return problems


def verify_plan(management: Management, vhost: str, plan: Plan) -> list[str]:
    return diff_plan(
        plan, management.exchanges(vhost), management.queues(vhost), management.bindings(vhost)
    )

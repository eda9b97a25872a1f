"""Compare a plan with what the broker has: each missing or mismatched piece as one line."""

from __future__ import annotations

from .cascade import Plan


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


def _entity_diff(kind: str, name: str, actual: dict | None, fields: dict, arguments: dict) -> list[str]:
    if actual is None:
        return [f"missing {kind} {name}"]
    problems = [
        f"{kind} {name}: {field} is {actual.get(field)}, expected {value}"
        for field, value in fields.items() if actual.get(field) != value
    ]
    return problems + _args_diff(kind, name, arguments, actual.get("arguments") or {})


def diff_plan(plan: Plan, exchanges: list[dict], queues: list[dict], bindings: list[dict]) -> list[str]:
    """Pure: the management API's listings of one vhost against the plan."""
    problems: list[str] = []
    have_exchanges = {e["name"]: e for e in exchanges}
    for e in plan.exchanges:
        problems += _entity_diff("exchange", e.name, have_exchanges.get(e.name),
                                 {"type": e.type, "durable": e.durable}, dict(e.arguments))
    have_queues = {q["name"]: q for q in queues}
    for q in plan.queues:
        problems += _entity_diff("queue", q.name, have_queues.get(q.name), {"durable": q.durable}, q.args)
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

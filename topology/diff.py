"""Compare a plan with what the broker has: each missing or mismatched piece as one line."""

from __future__ import annotations

from .cascade import Exchange, Plan, unroutable_name


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


def _kept_as_found(e: Exchange, actual: dict | None) -> bool:
    """An exchange another system declared without our arguments, which provisioning keeps."""
    return e.may_exist_without_arguments and actual is not None and not actual.get("arguments")


def diff_plan(plan: Plan, exchanges: list[dict], queues: list[dict], bindings: list[dict]) -> list[str]:
    """Pure: the management API's listings of one vhost against the plan. An exchange kept as
    another system declared it is not a problem here but a warning (:func:`diff_warnings`)."""
    problems: list[str] = []
    have_exchanges = {e["name"]: e for e in exchanges}
    for e in plan.exchanges:
        actual = have_exchanges.get(e.name)
        arguments = {} if _kept_as_found(e, actual) else dict(e.arguments)
        problems += _entity_diff("exchange", e.name, actual, {"type": e.type, "durable": e.durable}, arguments)
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


def diff_warnings(plan: Plan, exchanges: list[dict]) -> list[str]:
    """What works, but less than planned: the delivery exchange of a cascade shared with
    NServiceBus has no alternate exchange, so the unroutable catch is gone."""
    have = {e["name"]: e for e in exchanges}
    return [
        f"exchange {e.name} has no alternate-exchange (declared by another system): a message for a "
        f"destination with no queue bound is dropped by the broker, not kept in {unroutable_name(plan.version.prefix)}"
        for e in plan.exchanges if _kept_as_found(e, have.get(e.name))
    ]

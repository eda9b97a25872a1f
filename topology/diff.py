"""Compare a plan with what the broker has: each missing or mismatched piece as one line;
shards left beyond a version's count; and how its quorum queues are replicated over a cluster."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .cascade import Exchange, Plan, Version, delivery_exchange, shard_of_name, shard_suffix, unroutable_name

# What a broker reports of its own accord: RabbitMQ 4 lists the queue type of a classic queue
# declared without one (the default type) as an argument, which 3.x did not.
_IMPLIED = {"x-queue-type": "classic"}


def _args_diff(kind: str, name: str, expected: dict, actual: dict) -> list[str]:
    actual = {k: v for k, v in actual.items() if k in expected or _IMPLIED.get(k) != v}
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
        f"destination with no queue bound is not kept in {unroutable_name(plan.version.prefix)}; from classic "
        "queues the broker drops it, and from quorum queues (at-least-once dead-lettering) it waits in the last "
        "level, tried again every dead_letter_worker_publisher_confirm_timeout, and 32 of them stall that level for "
        "every destination (NServiceBus.RabbitMQ#1407); the platform binds each endpoint before taking a message for it "
        "and never unbinds one, so the risk is an endpoint queue deleted by hand"
        for e in plan.exchanges if _kept_as_found(e, have.get(e.name))
    ]


# --- shards beyond the version's count (after lowering it) ------------------------------------


@dataclass(frozen=True)
class Leftover:
    """A shard the broker still has although the version no longer counts it."""

    shard: int
    queues: int  # its level queues still on the broker
    exchanges: int  # its level and ingest exchanges
    messages: int  # in its level queues, as far as the broker has counted them
    uncounted: int  # level queues without statistics yet (just declared, or stats disabled)


def leftover_shards(version: Version, exchanges: list[dict], queues: list[dict]) -> list[Leftover]:
    """Pure: shards at or beyond ``version.shards`` that still have queues or exchanges."""
    found: dict[int, dict] = {}

    def entry(shard: int) -> dict:
        return found.setdefault(shard, {"queues": 0, "exchanges": 0, "messages": 0, "uncounted": 0})

    for q in queues:
        shard = shard_of_name(version.prefix, q["name"])
        if shard is not None and shard >= version.shards:
            counts = entry(shard)
            counts["queues"] += 1
            if isinstance(q.get("messages"), int):
                counts["messages"] += q["messages"]
            else:
                counts["uncounted"] += 1
    for e in exchanges:
        shard = shard_of_name(version.prefix, e["name"])
        if shard is not None and shard >= version.shards:
            entry(shard)["exchanges"] += 1
    return [Leftover(shard, **counts) for shard, counts in sorted(found.items())]


def leftover_warning(version: Version, leftover: Leftover) -> str:
    if not leftover.uncounted:
        counted = f"{leftover.messages} message(s)"
    elif leftover.uncounted < leftover.queues:
        counted = f"at least {leftover.messages} message(s) ({leftover.uncounted} queue(s) not counted yet)"
    else:
        counted = "messages the broker has not counted yet (ask again in a few seconds)"
    return (
        f"shard {leftover.shard} is beyond the {version.shards} shard(s) configured and still exists "
        f"({leftover.queues} queue(s), {leftover.exchanges} exchange(s) named *{shard_suffix(leftover.shard)}) "
        f"holding {counted}: they still dead-letter into {delivery_exchange(version.prefix)}, so nothing is lost; "
        f"it is not deleted automatically: delete its queues and exchanges once it is empty"
    )


# --- replication over a cluster ------------------------------------------------------------


@dataclass(frozen=True)
class Replication:
    problems: list[str]  # quorum queues not replicated to every running node, or without a leader
    leaders: Counter = field(default_factory=Counter)  # node -> quorum leaders of the plan on it
    checked: int = 0  # quorum queues of the plan found on the broker

    @property
    def summary(self) -> str:
        """``quorum leaders: a@h 10, b@h 9, c@h 10`` (every running node, none left out)."""
        if not self.checked:
            return "quorum leaders: none (no quorum queues in this cascade)"
        return "quorum leaders: " + ", ".join(f"{node} {count}" for node, count in sorted(self.leaders.items()))


def replication_check(plan: Plan, details: dict[str, dict], running_nodes: list[str]) -> Replication:
    """Pure: every quorum queue of the plan (levels, unroutable) must have a member on every
    running node of the cluster, and a leader. ``details``: queue name -> the management API's
    queue JSON (``members``, ``leader``, ``online``); a queue missing there is diff_plan's to
    report. On one node this passes trivially (one member, one node)."""
    problems, leaders, checked = [], Counter({node: 0 for node in running_nodes}), 0
    for q in plan.queues:
        actual = details.get(q.name)
        if q.args.get("x-queue-type") != "quorum" or actual is None or actual.get("type", "quorum") != "quorum":
            continue
        checked += 1
        members, online = list(actual.get("members") or []), list(actual.get("online") or [])
        missing = [node for node in running_nodes if node not in members]
        if missing:
            problems.append(
                f"quorum queue {q.name} has {len(members)} member(s) ({', '.join(members) or 'none'}) for "
                f"{len(running_nodes)} running node(s): not replicated to {', '.join(missing)}"
            )
        leader = actual.get("leader")
        if leader:
            leaders[leader] += 1
        else:
            problems.append(f"quorum queue {q.name} has no leader (members {', '.join(members) or 'none'}; "
                            f"online {', '.join(online) or 'none'})")
    return Replication(problems, leaders, checked)

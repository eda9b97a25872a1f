"""A small model of how RabbitMQ routes, to walk a message through a plan without a broker.

It follows the broker's documented rules, no more: a topic binding's ``*`` is one word and
``#`` zero or more; a direct binding matches a key exactly; a message is routed by its routing
key and its ``CC`` keys; an exchange that routes a message nowhere hands it to its
``alternate-exchange``; a queue's message dead-letters after its TTL to the queue's
``x-dead-letter-exchange`` with the same keys. The live tests (test_cascade_live.py) check the
real broker against the same expectations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topology.cascade import Plan


def topic_matches(pattern: str, key: str) -> bool:
    def match(p: list[str], k: list[str]) -> bool:
        if not p:
            return not k
        if p[0] == "#":
            return any(match(p[1:], k[i:]) for i in range(len(k) + 1))
        return bool(k) and (p[0] == "*" or p[0] == k[0]) and match(p[1:], k[1:])

    return match(pattern.split("."), key.split("."))


@dataclass
class Walk:
    """Where a message went: each queue it waited in (with the TTL), and where it ended."""

    waited: list[tuple[str, int]] = field(default_factory=list)
    ended_in: set[str] = field(default_factory=set)
    exchanges_seen: list[str] = field(default_factory=list)

    @property
    def waited_ms(self) -> int:
        return sum(ttl for _, ttl in self.waited)


def walk(plan: Plan, exchange: str, routing_key: str, cc: tuple[str, ...] = (), *, endpoint_queues=(),
         max_steps: int = 1000) -> Walk:
    """Publish to ``exchange`` and follow the message until it rests in queues without a TTL
    (endpoint queues, bound from outside the plan by ``endpoint_queues``: (source, queue, key))."""
    exchanges = {e.name: e for e in plan.exchanges}
    queues = {q.name: q for q in plan.queues}
    bindings = [*plan.bindings, *(_binding(*b) for b in endpoint_queues)]
    keys = (routing_key, *cc)
    result, pending = Walk(), [exchange]
    for _ in range(max_steps):
        if not pending:
            return result
        name = pending.pop()
        result.exchanges_seen.append(name)
        targets = _route(exchanges[name], [b for b in bindings if b.source == name], keys)
        if not targets and "alternate-exchange" in dict(exchanges[name].arguments):
            pending.append(dict(exchanges[name].arguments)["alternate-exchange"])
            continue
        for kind, target in targets:
            if kind == "exchange":
                pending.append(target)
            elif target in queues and "x-message-ttl" in queues[target].args:
                args = queues[target].args
                result.waited.append((target, args["x-message-ttl"]))
                pending.append(args["x-dead-letter-exchange"])
            else:
                result.ended_in.add(target)
    raise AssertionError(f"message still moving after {max_steps} steps: {result}")


def _binding(source: str, queue: str, key: str):
    from topology.cascade import Binding

    return Binding(source, queue, "queue", key)


def _route(exchange, bindings, keys) -> set[tuple[str, str]]:
    if exchange.type == "fanout":
        return {(b.destination_type, b.destination) for b in bindings}
    if exchange.type == "direct":
        return {(b.destination_type, b.destination) for b in bindings if b.routing_key in keys}
    return {(b.destination_type, b.destination) for b in bindings
            if any(topic_matches(b.routing_key, key) for key in keys)}

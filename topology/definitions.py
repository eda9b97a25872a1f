"""A plan as RabbitMQ definitions JSON: topology as code, importable with
``rabbitmqctl import_definitions`` or the management UI (seed 004 wants the ~N²/2 bindings
generated, never typed by hand)."""

from __future__ import annotations

from .cascade import Plan


def plan_definitions(plan: Plan, vhost: str = "/") -> dict:
    return {
        "vhosts": [{"name": vhost}],
        "exchanges": [
            {
                "name": e.name,
                "vhost": vhost,
                "type": e.type,
                "durable": e.durable,
                "auto_delete": False,
                "internal": False,
                "arguments": dict(e.arguments),
            }
            for e in plan.exchanges
        ],
        "queues": [
            {
                "name": q.name,
                "vhost": vhost,
                "durable": q.durable,
                "auto_delete": False,
                "arguments": q.args,
            }
            for q in plan.queues
        ],
        "bindings": [
            {
                "source": b.source,
                "vhost": vhost,
                "destination": b.destination,
                "destination_type": b.destination_type,
                "routing_key": b.routing_key,
                "arguments": {},
            }
            for b in plan.bindings
        ],
    }

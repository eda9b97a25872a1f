"""Declaring what topology/ plans: exchanges, queues and bindings, idempotently.

Declaring what already exists with the same arguments is a no-op on RabbitMQ; a clash (another
queue type, another TTL) is a :class:`~rabbit.errors.TopologyConflict` with the broker's reason.
"""

from __future__ import annotations

from kombu import Connection, Exchange, Queue

from topology import cascade

from .connection import channel_of
from .errors import TopologyMissing


def kombu_exchange(exchange: cascade.Exchange) -> Exchange:
    return Exchange(exchange.name, type=exchange.type, durable=exchange.durable, auto_delete=False,
                    arguments=dict(exchange.arguments) or None)


def kombu_queue(queue: cascade.Queue) -> Queue:
    return Queue(queue.name, durable=queue.durable, auto_delete=False, queue_arguments=queue.args or None)


def _bind(channel, binding: cascade.Binding) -> None:
    if binding.destination_type == "queue":
        Queue(binding.destination).bind_to(binding.source, binding.routing_key, channel=channel)
    else:
        Exchange(binding.destination).bind_to(binding.source, binding.routing_key, channel=channel)


def declare_plan(conn: Connection, plan: cascade.Plan) -> None:
    """Every exchange, queue and binding of the plan."""
    with channel_of(conn) as channel:
        for exchange in plan.exchanges:
            kombu_exchange(exchange).declare(channel=channel)
        for queue in plan.queues:
            kombu_queue(queue).queue_declare(channel=channel)
        for binding in plan.bindings:
            _bind(channel, binding)


def teardown_plan(conn: Connection, plan: cascade.Plan) -> None:
    """Delete every queue and exchange of the plan, and with them their bindings."""
    with channel_of(conn) as channel:
        for queue in plan.queues:
            channel.queue_delete(queue.name)
        for exchange in plan.exchanges:
            channel.exchange_delete(exchange.name)


def declare_queue(conn: Connection, queue: cascade.Queue) -> None:
    with channel_of(conn) as channel:
        kombu_queue(queue).queue_declare(channel=channel)


def bind(conn: Connection, binding: cascade.Binding) -> None:
    """Bind to an existing source: binding to a missing exchange is TopologyMissing, never a
    silent re-creation of it without its arguments (the delivery exchange's alternate exchange)."""
    with channel_of(conn) as channel:
        _bind(channel, binding)


def unbind(conn: Connection, binding: cascade.Binding) -> None:
    with channel_of(conn) as channel:
        if binding.destination_type == "queue":
            channel.queue_unbind(binding.destination, binding.source, binding.routing_key)
        else:
            channel.exchange_unbind(binding.destination, binding.source, binding.routing_key)


def queue_depth(conn: Connection, name: str) -> int | None:
    """Messages ready in a queue, or None when it does not exist (passive declare)."""
    try:
        with channel_of(conn) as channel:
            return channel.queue_declare(name, passive=True).message_count
    except TopologyMissing:
        return None


def delete_queue(conn: Connection, name: str) -> None:
    with channel_of(conn) as channel:
        channel.queue_delete(name)


def purge_queue(conn: Connection, name: str) -> int:
    with channel_of(conn) as channel:
        return channel.queue_purge(name) or 0

"""Declaring what topology/ plans: exchanges, queues and bindings, idempotently.

Declaring what already exists with the same arguments is a no-op on RabbitMQ; a clash (another
queue type, another TTL) is a :class:`~rabbit.errors.TopologyConflict` with the broker's reason.
"""

from __future__ import annotations

from kombu import Connection, Exchange, Queue

from topology import cascade

from .connection import channel_of
from .errors import TopologyConflict, TopologyMissing


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


def _declare_or_keep(conn: Connection, exchange: cascade.Exchange) -> str | None:
    """Declare an exchange another system may already have declared without our arguments
    (NServiceBus's delivery exchange has no alternate exchange): if the broker refuses ours only
    for its arguments, keep theirs as it is and say so; any other difference is a conflict."""
    try:
        with channel_of(conn) as channel:
            kombu_exchange(exchange).declare(channel=channel)
        return None
    except TopologyConflict as conflict:
        try:
            with channel_of(conn) as channel:
                kombu_exchange(cascade.Exchange(exchange.name, exchange.type, exchange.durable)).declare(channel=channel)
        except TopologyConflict:
            raise conflict from None
    wanted = ", ".join(f"{k}={v}" for k, v in exchange.arguments)
    return f"exchange {exchange.name} already exists without {wanted}: kept as it is"


def declare_plan(conn: Connection, plan: cascade.Plan, queue_conn=None) -> list[str]:
    """Every exchange, queue and binding of the plan. Returns one line per exchange kept as
    another system declared it (see :func:`_declare_or_keep`). ``queue_conn(i)``, if given, is
    the connection to declare the plan's i-th queue through (where its leader goes)."""
    kept = [line for e in plan.exchanges if e.may_exist_without_arguments
            if (line := _declare_or_keep(conn, e))]
    with channel_of(conn) as channel:
        for exchange in plan.exchanges:
            if not exchange.may_exist_without_arguments:
                kombu_exchange(exchange).declare(channel=channel)
    for index, queue in enumerate(plan.queues):
        declare_queue(queue_conn(index) if queue_conn else conn, queue)
    with channel_of(conn) as channel:
        for binding in plan.bindings:
            _bind(channel, binding)
    return kept


def teardown_plan(conn: Connection, plan: cascade.Plan) -> None:
    """Delete every queue and exchange of the plan, and with them their bindings."""
    with channel_of(conn) as channel:
        for queue in plan.queues:
            channel.queue_delete(queue.name)
        for exchange in plan.exchanges:
            channel.exchange_delete(exchange.name)


def declare_task_queue(conn: Connection, queue: Queue) -> None:
    """A Celery task queue as Celery declares it (its exchange, the queue, the binding)."""
    with channel_of(conn) as channel:
        queue(channel).declare()


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

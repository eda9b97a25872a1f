"""The one kombu adapter: declares a plan, binds endpoint queues, tears a version down.

Everything here is idempotent: declaring what already exists with the same arguments is a
no-op on RabbitMQ. A declaration that clashes with what exists (another queue type, another
TTL) becomes a :class:`TopologyConflict` with the broker's one-line reason.
"""

from __future__ import annotations

from contextlib import contextmanager

from amqp.exceptions import NotFound, PreconditionFailed
from kombu import Connection, Exchange, Queue

from . import cascade
from .cascade import Plan


class TopologyConflict(Exception):
    """The broker already has an entity of that name, declared differently."""


class TopologyMissing(Exception):
    """An entity this operation needs does not exist on the broker."""


def _reason(exc: Exception) -> str:
    text = getattr(exc, "reply_text", None) or str(exc)
    return text.split(" - ", 1)[-1] if text.startswith(("PRECONDITION_FAILED", "NOT_FOUND")) else text


@contextmanager
def _channel(connection: Connection):
    """A fresh channel per operation: a broker error closes the channel it happened on."""
    channel = connection.channel()
    try:
        yield channel
    except PreconditionFailed as exc:
        raise TopologyConflict(_reason(exc)) from None
    except NotFound as exc:
        raise TopologyMissing(_reason(exc)) from None
    finally:
        try:
            channel.close()
        except Exception:  # the broker already closed it after an error
            pass


def kombu_exchange(exchange: cascade.Exchange) -> Exchange:
    return Exchange(
        exchange.name,
        type=exchange.type,
        durable=exchange.durable,
        auto_delete=False,
        arguments=dict(exchange.arguments) or None,
    )


def kombu_queue(queue: cascade.Queue) -> Queue:
    return Queue(queue.name, durable=queue.durable, auto_delete=False, queue_arguments=queue.args or None)


def declare_plan(connection: Connection, plan: Plan) -> None:
    """Declare every exchange, queue and binding of the plan (idempotent)."""
    with _channel(connection) as channel:
        for exchange in plan.exchanges:
            kombu_exchange(exchange).declare(channel=channel)
        for queue in plan.queues:
            kombu_queue(queue).queue_declare(channel=channel)
        for b in plan.bindings:
            if b.destination_type == "queue":
                Queue(b.destination).bind_to(b.source, b.routing_key, channel=channel)
            else:
                Exchange(b.destination).bind_to(b.source, b.routing_key, channel=channel)


def teardown_plan(connection: Connection, plan: Plan) -> None:
    """Delete every queue and exchange of the plan, and with them their bindings."""
    with _channel(connection) as channel:
        for queue in plan.queues:
            channel.queue_delete(queue.name)
        for exchange in plan.exchanges:
            channel.exchange_delete(exchange.name)


def endpoint_queue(destination: str) -> cascade.Queue:
    """An endpoint's queue is named after it, as in the seeds ("destination" queue)."""
    return cascade.Queue(cascade.check_destination(destination))


def declare_queue(connection: Connection, queue: cascade.Queue) -> str:
    with _channel(connection) as channel:
        kombu_queue(queue).queue_declare(channel=channel)
    return queue.name


def bind_endpoint(connection: Connection, prefix: str, destination: str) -> str:
    """Declare the endpoint's queue and bind it with ``#.<destination>`` to the delivery exchange.

    The delivery exchange must exist (provision first): binding to a missing exchange is an
    error rather than a silent re-creation without its alternate exchange.
    """
    queue = endpoint_queue(destination)
    with _channel(connection) as channel:
        kombu_queue(queue).queue_declare(channel=channel)
        Queue(queue.name).bind_to(
            cascade.delivery_exchange(prefix), cascade.endpoint_binding_key(destination), channel=channel
        )
    return queue.name


def unbind_endpoint(connection: Connection, prefix: str, destination: str) -> None:
    with _channel(connection) as channel:
        channel.queue_unbind(
            destination, cascade.delivery_exchange(prefix), cascade.endpoint_binding_key(destination)
        )


def queue_depth(connection: Connection, name: str) -> int | None:
    """Messages ready in a queue, or None when it does not exist (passive declare)."""
    try:
        with _channel(connection) as channel:
            return channel.queue_declare(name, passive=True).message_count
    except TopologyMissing:
        return None


def poison_queue(version: cascade.Version) -> cascade.Queue:
    """Where migration tools park messages whose remaining delay cannot be worked out."""
    return cascade.Queue(f"{version.prefix}delay-migrate-poison", arguments=version.kind_arguments)

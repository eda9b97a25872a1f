"""Small AMQP helpers for live-broker tests: confirmed publishes and polling gets."""

import time

import amqp


def _kombu(conn):
    """A rabbit.Session's kombu connection (tests read and write the broker with raw AMQP)."""
    return getattr(conn, "conn", conn)


def publish(conn, exchange: str, key: str, body: bytes = b"x", headers: dict | None = None) -> None:
    """Publish persistently and wait for the broker's confirm."""
    channel = _kombu(conn).channel()
    try:
        channel.confirm_select()
        channel.basic_publish_confirm(
            amqp.Message(body, delivery_mode=2, application_headers=headers or {}), exchange, key
        )
    finally:
        channel.close()


def get(conn, queue: str):
    """One message from the queue (acked), or None."""
    channel = _kombu(conn).channel()
    try:
        return channel.basic_get(queue, no_ack=True)
    finally:
        channel.close()


def wait_get(conn, queue: str, timeout: float, poll: float = 0.01):
    """The first message to arrive in the queue within timeout, with its arrival time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = get(conn, queue)
        if message is not None:
            return message, time.monotonic()
        time.sleep(poll)
    return None, time.monotonic()


def snapshot(management, vhost: str, prefix: str):
    """Everything under a prefix, as comparable sets (to prove re-declaring changes nothing)."""
    def mine(name):
        return name.startswith(prefix)

    exchanges = {(e["name"], e["type"], e["durable"], tuple(sorted(e["arguments"].items())))
                 for e in management.exchanges(vhost) if mine(e["name"])}
    queues = {(q["name"], q["durable"], tuple(sorted(q["arguments"].items())))
              for q in management.queues(vhost) if mine(q["name"])}
    bindings = {(b["source"], b["destination"], b["destination_type"], b["routing_key"])
                for b in management.bindings(vhost) if mine(b["source"])}
    return exchanges, queues, bindings

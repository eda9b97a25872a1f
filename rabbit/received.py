"""A message read from a queue, as plain data: callers never hold amqp's Message objects."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Received:
    tag: int  # delivery tag on the channel it came from: ack or reject it there
    body: bytes
    headers: dict = field(default_factory=dict)
    properties: dict = field(default_factory=dict)  # AMQP properties except the headers
    exchange: str = ""
    routing_key: str = ""
    queue: str = ""
    redelivered: bool = False


def received(message, queue: str) -> Received:
    info = message.delivery_info
    properties = {k: v for k, v in message.properties.items() if k != "application_headers"}
    return Received(
        tag=message.delivery_tag,
        body=message.body,
        headers=message.headers or {},
        properties=properties,
        exchange=info.get("exchange", ""),
        routing_key=info.get("routing_key", ""),
        queue=queue,
        redelivered=bool(info.get("redelivered")),
    )

"""What each stage of a delayed message costs RabbitMQ, per version: the broker's own CPU time
(bench/broker_cpu.py) for 10,000 platform-shaped messages at a time, in a vhost of its own.

    .venv/bin/python -m bench.broker_stages [--messages 10000] [--versions v2,v3]

Stages: a confirmed publish into the first level; each dead-letter hop through the levels (one,
then two set bits); and taking the messages from the endpoint queue with one ack per message
or with AMQP's multiple acks. This is the evidence behind "what limits" the burst, throughput
and broker-CPU figures in docs/operations/performance.md.
"""

from __future__ import annotations

import argparse
import time
import uuid
from datetime import datetime, timezone

from bench.broker_cpu import broker_pid, cpu_seconds
from harness.platform import AMQP, MANAGEMENT
from rabbit import Broker, Management, Outgoing
from topology import cascade


def platform_message(version: cascade.Version, delay: int, destination: str) -> Outgoing:
    """The shape the relay publishes (scheduling/messages/wire.py): a Celery task message with the
    platform's headers; built here without Django."""
    message_id = str(uuid.uuid4())
    r = cascade.route(version, delay, destination)
    eta = datetime.now(timezone.utc).isoformat()
    body = f'[["{message_id}"],{{}},{{"callbacks":null,"errbacks":null,"chain":null,"chord":null}}]'.encode()
    now_ms = int(time.time() * 1000)
    headers = {"lang": "py", "task": "scheduling.deliver", "id": message_id, "root_id": message_id, "eta": eta,
               "retries": 0, "x-dp-message-id": message_id, "x-dp-due-at-ms": now_ms + delay * 1000,
               "x-dp-version": version.name, "x-dp-delay-ms": delay * 1000, "x-dp-published-at-ms": now_ms,
               **r.headers}
    properties = {"content_type": "application/json", "content_encoding": "utf-8", "correlation_id": message_id,
                  "message_id": message_id}
    return Outgoing(r.exchange, r.routing_key, body, headers, properties)


def consume(session, queue: str, n: int, multiple: bool) -> None:
    channel = session.conn.channel()
    channel.basic_qos(0, 2000, False)
    got = [0]

    def on_message(message):
        got[0] += 1
        if not multiple:
            channel.basic_ack(message.delivery_tag)
        elif got[0] % 100 == 0 or got[0] == n:
            channel.basic_ack(message.delivery_tag, multiple=True)

    channel.basic_consume(queue, callback=on_message)
    deadline = time.monotonic() + 120
    while got[0] < n and time.monotonic() < deadline:
        try:
            session.conn.drain_events(timeout=1)
        except OSError:
            pass
    channel.close()


def stage_costs(broker: Broker, version: cascade.Version, pids: list[int], n: int, delay: int, multiple: bool,
                queue_type: str = "classic") -> dict:
    """Microseconds of broker CPU per message for each stage (``pids``: the nodes, summed)."""
    def cpu():
        return sum(cpu_seconds(pid) for pid in pids)

    with broker.session() as session:
        queue = f"stage-{uuid.uuid4().hex[:6]}"
        session.declare_queue(cascade.endpoint_queue(queue, queue_type))
        session.bind(cascade.endpoint_binding(version, queue))
        out = [platform_message(version, delay, queue) for _ in range(n)]
        start = cpu()
        session.publish(out, window=128)
        published = cpu()
        while (session.queue_depth(queue) or 0) < n:
            time.sleep(0.2)
        arrived = cpu()
        consume(session, queue, n, multiple)
        consumed = cpu()
        session.delete_queue(queue)
    return {"publish": (published - start) * 1e6 / n, "cascade": (arrived - published) * 1e6 / n,
            "consume": (consumed - arrived) * 1e6 / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10000)
    parser.add_argument("--versions", default="v2,v3")
    args = parser.parse_args()
    management, vhost = Management(MANAGEMENT), f"dp-stages-{uuid.uuid4().hex[:6]}"
    management.create_vhost(vhost)
    broker, pid = Broker(f"{AMQP}/{vhost}", MANAGEMENT), broker_pid()
    rows = []
    try:
        for name in args.versions.split(","):
            version = cascade.get_version(name)
            with broker.session() as session:
                session.declare(cascade.cascade_plan(version))
            for label, delay, multiple in (("no hop, straight to the endpoint", 0, False),
                                           ("1 hop (level 0)", 1, False),
                                           ("2 hops (levels 1, 0)", 3, False),
                                           ("1 hop, multiple acks", 1, True)):
                costs = stage_costs(broker, version, [pid], args.messages, delay, multiple)
                rows.append((name, label, costs))
                print(f"{name} {label:<34} publish {costs['publish']:5.0f} µs  cascade {costs['cascade']:5.0f} µs  "
                      f"consume+ack {costs['consume']:5.0f} µs", flush=True)
    finally:
        management.delete_vhost(vhost)


if __name__ == "__main__":
    main()

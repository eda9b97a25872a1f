"""What a three-node cluster costs against one node, in one run: the v3 cascade's transit time
beyond the TTL at a light load, and the broker CPU per message (summed over the nodes) of each
stage, with quorum endpoint queues on both (what DELAY_QUEUE_TYPE=quorum declares).

    .venv/bin/python -m bench.studies.cluster_cost [--messages 10000] [--light 300]

One node: the local RabbitMQ (127.0.0.1:5672). Cluster: three nodes of its own
(harness/rabbit_cluster.py, ports 5881…), replicated to all three, leaders spread. Both on this
machine's 2 cores, so the cluster's three Erlang VMs share the cores one node had to itself: the
CPU figure is what replication costs in work, not what three machines would take in time.
Prints a table and writes artifacts/cluster_cost.json.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid

from bench.broker_cpu import broker_pid
from bench.broker_stages import platform_message, stage_costs
from bench.measure import idle_share, percentiles
from harness.paths import ARTIFACTS
from harness.platform import AMQP, MANAGEMENT
from rabbit import Broker
from topology import cascade


def transit_ms(broker: Broker, version: cascade.Version, n: int, per_second: int = 50, delay: int = 1) -> dict:
    """Milliseconds from publish + delay to arrival in the endpoint queue's consumer, n messages
    at ``per_second`` (a light load: the cascade's own latency, not a queue's backlog)."""
    queue = f"transit-{uuid.uuid4().hex[:6]}"
    arrivals: dict[str, float] = {}
    with broker.session() as session:
        session.declare_queue(cascade.endpoint_queue(queue, "quorum"))
        session.bind(cascade.endpoint_binding(version, queue))
    due: dict[str, float] = {}
    done = threading.Event()

    def consume():
        with broker.session() as session:
            channel = session.conn.channel()
            channel.basic_qos(0, 500, False)

            def on_message(message):
                arrivals[message.headers["x-dp-message-id"]] = time.time()
                channel.basic_ack(message.delivery_tag)

            channel.basic_consume(queue, callback=on_message)
            while not done.is_set():
                try:
                    session.conn.drain_events(timeout=0.2)
                except OSError:
                    pass
            channel.close()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    with broker.session() as session:
        for _ in range(n):
            message = platform_message(version, delay, queue)
            due[message.headers["x-dp-message-id"]] = time.time() + delay
            session.publish([message])
            time.sleep(1 / per_second)
    deadline = time.monotonic() + 60
    while len(arrivals) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    done.set()
    consumer.join(5)
    with broker.session() as session:
        session.delete_queue(queue)
    return {"arrived": len(arrivals), **percentiles([(arrivals[i] - due[i]) * 1000 for i in arrivals])}


def measure(label: str, url: str, management_url: str, pids: list[int], args) -> dict:
    broker = Broker(url, management_url)
    management, vhost = broker.management, broker.vhost
    management.create_vhost(vhost)
    try:
        version = cascade.V3
        with broker.session() as session:
            session.declare(cascade.cascade_plan(version))
        transit = transit_ms(broker, version, args.light)
        stages = {name: stage_costs(broker, version, pids, args.messages, delay, True, queue_type="quorum")
                  for name, delay in (("straight", 0), ("1 hop", 1), ("2 hops", 3))}
    finally:
        management.delete_vhost(vhost)
    row = {"target": label, "transit_ms": transit, "stages_us": stages}
    print(f"{label:<16} transit p50 {transit['p50']:6.1f} ms  p99 {transit['p99']:6.1f} ms  | broker CPU µs/msg: "
          + "  ".join(f"{name}: publish {c['publish']:.0f} + cascade {c['cascade']:.0f} + consume {c['consume']:.0f} "
                      f"= {sum(c.values()):.0f}" for name, c in stages.items()), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10000)
    parser.add_argument("--light", type=int, default=300, help="messages of the transit measurement (50/s)")
    args = parser.parse_args()
    from harness.rabbit_cluster import LocalCluster

    print(f"idle {idle_share():.0%} before the run")
    rows = [measure("one node", f"{AMQP}/dp-cost-{uuid.uuid4().hex[:6]}", MANAGEMENT, [broker_pid()], args)]
    with LocalCluster(name="dpb", port=5881) as cluster:
        pids = [broker_pid(cluster.node(i)) for i in cluster.nodes]
        rows.append(measure("3-node cluster", cluster.broker_url(f"dp-cost-{uuid.uuid4().hex[:6]}"),
                            cluster.management_url, pids, args))
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "cluster_cost.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

"""How fast one level queue can dead-letter, and k of them (shards): the ceiling of one cascade.

    .venv/bin/python -m bench.studies.queue_ceiling [--messages 20000] [--shards 1,2,4] [--cluster] [--hold 100000]

A level queue is a quorum queue that dead-letters (at-least-once, reject-publish, as v2/v3) into
the next exchange. Here k such queues each get messages/k messages whose per-message TTL is set
so that every one expires at the same instant; from that instant on, the queues do nothing but
dead-letter into one quorum target queue. The figure is messages / seconds until the target
holds them all, with the broker's CPU seconds over the same span (summed over the nodes).
``--cluster`` runs it on a three-node cluster of its own (harness/rabbit_cluster.py, ports 5881…),
each shard's queue led by another node; without it, on the local node (127.0.0.1:5672).
Prints one line per k and writes artifacts/queue_ceiling.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import uuid

from bench.broker_cpu import broker_pid, cpu_seconds
from bench.measure import idle_share
from harness.paths import ARTIFACTS
from harness.platform import AMQP, MANAGEMENT
from rabbit import Broker, Management, Outgoing
from topology import cascade

LEVEL_ARGS = {**dict(cascade.V3.kind_arguments), **dict(cascade.V3.dead_letter_arguments)}
BODY = b"x" * 106  # the platform's typical body size (docs/operations/performance.md)


def run(broker: Broker, management: Management, pids: list[int], messages: int, shards: int) -> dict:
    vhost = broker.vhost
    target = "ceiling.target"
    sources = [f"ceiling.level-s{s}" for s in range(shards)]
    with broker.session() as session:
        session.declare_queue(cascade.Queue(target, arguments=cascade._frozen({"x-queue-type": "quorum"})))
        for s, name in enumerate(sources):
            args = {**LEVEL_ARGS, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": target}
            session.declare(cascade.Plan(version=cascade.V3, exchanges=(), queues=(cascade.Queue(name, arguments=cascade._frozen(args)),),
                                         bindings=()), first_node=s)
    expire_at = time.time() + 4 + messages / 4000  # after the last publish
    per = messages // shards
    for name in sources:
        for start in range(0, per, 2000):
            ttl = str(max(1, int((expire_at - time.time()) * 1000)))  # every message expires at expire_at
            chunk = [Outgoing("", name, BODY, properties={"expiration": ttl}) for _ in range(min(2000, per - start))]
            outcome = broker.publish(chunk, window=512)
            assert not outcome.failed and not outcome.error, (outcome.error, list(outcome.failed.items())[:3])
    total = per * shards
    leaders = {q["name"]: q.get("leader") for q in management.queues(vhost) if q["name"] in sources}
    while time.time() < expire_at:
        time.sleep(0.005)
    cpu0, t0 = sum(cpu_seconds(p) for p in pids), time.monotonic()
    with broker.session() as session:
        while (session.queue_depth(target) or 0) < total:
            if time.monotonic() - t0 > 300:
                raise SystemExit(f"dead-lettering stalled: {session.queue_depth(target)} of {total}")
            time.sleep(0.02)
    seconds, cpu = time.monotonic() - t0, sum(cpu_seconds(p) for p in pids) - cpu0
    with broker.session() as session:
        for name in [*sources, target]:
            session.delete_queue(name)
    return {"shards": shards, "messages": total, "seconds": round(seconds, 3), "per_second": round(total / seconds),
            "broker_cpu_s": round(cpu, 2), "broker_cpu_us_per_msg": round(cpu * 1e6 / total, 1),
            "leaders": sorted(set(leaders.values()))}


def disk_bytes(path: str) -> int:
    return int(subprocess.run(["du", "-sb", path], capture_output=True, text=True, check=True).stdout.split()[0])


def hold(broker: Broker, management: Management, messages: int, data_dir: str) -> dict:
    """What ``messages`` platform-shaped messages (bench/broker_stages.py) parked in one level
    queue cost: the queue's memory (management API) and the node's disk (its Raft log)."""
    from bench.broker_stages import platform_message

    queue = cascade.Queue("ceiling.hold", arguments=cascade._frozen(LEVEL_ARGS))
    with broker.session() as session:
        session.declare_queue(queue)
    before = disk_bytes(data_dir)
    for start in range(0, messages, 5000):
        batch = [platform_message(cascade.V3, 0, "x") for _ in range(min(5000, messages - start))]
        batch = [Outgoing("", queue.name, m.body, m.headers, m.properties) for m in batch]
        outcome = broker.publish(batch, window=512)
        assert not outcome.failed and not outcome.error
    time.sleep(10)  # the WAL written out to segments, statistics collected
    size = len(batch[0].body)
    memory = (management.queue(broker.vhost, queue.name) or {}).get("memory") or 0
    disk = disk_bytes(data_dir) - before
    with broker.session() as session:
        session.delete_queue(queue.name)
    return {"messages": messages, "body_bytes": size, "queue_memory_bytes_per_msg": round(memory / messages, 1),
            "disk_bytes_per_msg": round(disk / messages, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--hold", type=int, default=0, help="also: memory and disk of this many parked messages "
                                                             "(one node only)")
    args = parser.parse_args()
    vhost = f"dp-ceiling-{uuid.uuid4().hex[:6]}"
    cluster = None
    if args.cluster:
        from harness.rabbit_cluster import LocalCluster

        cluster = LocalCluster(name="dpb", port=5881).__enter__()
        url, management_url = cluster.broker_url(vhost), cluster.management_url
        pids = [broker_pid(cluster.node(i)) for i in cluster.nodes]
    else:
        url, management_url = f"{AMQP}/{vhost}", MANAGEMENT
        pids = [broker_pid()]
    results, management = [], Management(management_url)
    try:
        management.create_vhost(vhost)
        broker = Broker(url, management_url)
        print(f"{'3-node cluster' if cluster else 'one node'}, {args.messages} messages, idle {idle_share():.0%}")
        for k in (int(x) for x in args.shards.split(",")):
            result = run(broker, management, pids, args.messages, k)
            results.append(result)
            print(f"  {k} queue(s): {result['per_second']:>7,} dead-lettered/s ({result['seconds']} s), broker CPU "
                  f"{result['broker_cpu_us_per_msg']} µs/msg, leaders on {', '.join(result['leaders'])}")
        if args.hold and not cluster:
            held = hold(broker, management, args.hold, "/var/lib/rabbitmq/mnesia")
            results.append(held)
            print(f"  holding {held['messages']:,} platform messages (body {held['body_bytes']} B): queue memory "
                  f"{held['queue_memory_bytes_per_msg']} B/msg, disk {held['disk_bytes_per_msg']} B/msg")
    finally:
        management.delete_vhost(vhost)
        if cluster:
            cluster.__exit__(None, None, None)
    ARTIFACTS.mkdir(exist_ok=True)
    out = ARTIFACTS / f"queue_ceiling{'_cluster' if cluster else ''}.json"
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

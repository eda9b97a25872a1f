"""How fast the API's messages reach the broker: one node against a three-node cluster (issue 22:
make test-cluster timed out waiting for 5,000 messages to be published, which read as "under 55
messages/s to the cluster").

    .venv/bin/python -m bench.studies.cluster_publish [--messages 5000] [--chunk 500]

Each broker gets a platform of its own as make test-cluster starts it (gunicorn with 2 workers, a
Celery worker, quorum queues everywhere), and is sent ``--messages`` in bulk requests of
``--chunk``, one after another, as the test does. Two kinds of delay:

- ``long`` (an hour): nothing is delivered during the run, so "every message published" is reached
  the moment the last one is; the rate is messages over the time from the first request to that.
- ``test`` (5-30 s, the test's own): the figure is the same, and the row says how many were
  already *delivered* when the last was published: the test's wait counted ``published`` only,
  which can never reach the total once the first messages are delivered before the last are sent.

Beside each, the floor: the raw publisher (rabbit.Broker.publish, confirms, the relay's window)
into a quorum queue on the same broker. Prints a table and writes artifacts/cluster_publish.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid

from harness.paths import ARTIFACTS
from harness.platform import platform
from harness.rabbit_cluster import LocalCluster, cluster_platform
from harness.waiting import wait_until
from rabbit import Broker, Outgoing
from topology import cascade


def through_api(p, delays: list[float], chunk: int) -> dict:
    name = f"publish-{uuid.uuid4().hex[:6]}"
    p.api("POST", "/api/endpoints/", json={"name": name})
    started = time.monotonic()
    for start in range(0, len(delays), chunk):
        p.api("POST", "/api/messages/bulk/", json={"messages": [
            {"endpoint": name, "payload": {"n": start + i}, "delay_seconds": d}
            for i, d in enumerate(delays[start:start + chunk])]})
    accepted = time.monotonic() - started
    wait_until(lambda: p.count_status(name, "pending") == 0, 300, 0.05, "every message published")
    seconds = time.monotonic() - started
    return {"accepted_s": round(accepted, 2), "published_s": round(seconds, 2),
            "per_s": round(len(delays) / seconds), "delivered_by_then": p.count_status(name, "delivered"),
            "published_by_then": p.count_status(name, "published")}


def raw(broker_url: str, n: int) -> dict:
    """The floor: n confirmed publishes into a quorum queue of the same broker, in batches of 500."""
    broker = Broker(broker_url)
    queue = f"raw-{uuid.uuid4().hex[:6]}"
    with broker.session() as session:
        session.declare_queue(cascade.endpoint_queue(queue, "quorum"))
    body = json.dumps({"payload": {"n": 0}}).encode()
    started = time.monotonic()
    for start in range(0, n, 500):
        outcome = broker.publish([Outgoing("", queue, body, properties={"message_id": f"{start + i}"})
                                  for i in range(min(500, n - start))])
        assert not outcome.failed, outcome.error
    seconds = time.monotonic() - started
    broker.close_publisher()
    with broker.session() as session:
        session.delete_queue(queue)
    return {"published_s": round(seconds, 2), "per_s": round(n / seconds)}


def measure(p, n: int, chunk: int) -> dict:
    rng = random.Random(3)
    return {"long": through_api(p, [3600.0] * n, chunk),
            "test": through_api(p, [round(rng.uniform(5, 30), 3) for _ in range(n)], chunk),
            "raw": raw(p.env["BROKER_URL"], n)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--chunk", type=int, default=500)
    args = parser.parse_args()
    # the machine's node, a fresh vhost; the cluster: harness.rabbit_cluster's, as make test-cluster runs it
    with platform(web_workers=2, settings="delayplatform.settings_test", DELAY_QUEUE_TYPE="quorum") as p:
        p.start_worker(concurrency=2)
        results = {"one node": measure(p, args.messages, args.chunk)}
    with LocalCluster(name="dpp", port=5791) as cluster, cluster_platform(cluster) as p:
        results["cluster"] = measure(p, args.messages, args.chunk)
    print(f"\n{args.messages:,} messages through the bulk API in requests of {args.chunk} (quorum queues)\n")
    print("| broker | delays | accepted in | all published in | rate | delivered when the last was published | "
          "raw publisher |")
    print("|---|---|---|---|---|---|---|")
    for where, r in results.items():
        for kind in ("long", "test"):
            row = r[kind]
            print(f"| {where} | {'1 h' if kind == 'long' else '5-30 s'} | {row['accepted_s']} s | "
                  f"{row['published_s']} s | {row['per_s']:,}/s | {row['delivered_by_then']:,} | "
                  f"{r['raw']['per_s']:,}/s |")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "cluster_publish.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

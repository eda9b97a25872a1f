"""Broker memory per 100,000 messages in flight on v3, with envelopes and without: the memory the
level queues report (RabbitMQ's ``memory`` per queue, summed) and their broker messages, after
scheduling through the API, for two shapes of the same 100,000 messages:

- sparse: due anywhere in an hour (3,600-7,200 s): ~28 a second, so an envelope is mostly one;
- dense: due within one minute (3,600-3,660 s): ~1,700 a second.

    .venv/bin/python -m bench.studies.in_flight_memory [--messages 100000]

Each mode runs on a throwaway platform of its own (harness/platform.py); the figures are the
difference from the same queues before scheduling, once the broker's statistics have settled.
"""

from __future__ import annotations

import argparse
import random
import time
from urllib.parse import unquote, urlsplit

from bench.cases.base import Bench
from harness.platform import MANAGEMENT, platform
from harness.waiting import wait_until
from rabbit import Management

SHAPES = {"sparse": (3600, 7200), "dense": (3600, 3660)}


def level_queues(b: Bench) -> dict[str, dict]:
    """This platform's (its vhost, not the process's cached broker: each mode has a platform of its own)."""
    vhost = unquote(urlsplit(b.p.env["BROKER_URL"]).path.lstrip("/"))
    return {q["name"]: q for q in Management(MANAGEMENT).queues(vhost) if q["name"].startswith("dp.v3.delay-level")}


def totals(queues: dict[str, dict]) -> tuple[int, int]:
    return (sum(q.get("memory") or 0 for q in queues.values()), sum(q.get("messages") or 0 for q in queues.values()))


def settled(b: Bench, expected_messages: int) -> tuple[int, int]:
    """(memory, broker messages) once the message count has held still for 10 s."""
    last, since = None, time.monotonic()
    while True:
        memory, messages = totals(level_queues(b))
        if messages != last:
            last, since = messages, time.monotonic()
        elif time.monotonic() - since > 10 and messages >= expected_messages:
            return memory, messages
        time.sleep(1)


def run_mode(envelopes: str, n: int) -> dict:
    results = {}
    with platform(web_workers=4, settings="delayplatform.settings_test", DELAY_ENVELOPES=envelopes) as p:
        b = Bench(p, False, ("v3",))
        rng = random.Random(5)
        for shape, (low, high) in SHAPES.items():
            before_memory, before_messages = settled(b, 0)
            endpoint = b.endpoint(f"memory-{shape}", "v3")
            b.post(b.bodies(endpoint, [round(rng.uniform(low, high), 3) for _ in range(n)]))
            wait_until(lambda: b.count(endpoint, "published") >= n, 300, 0.5, "all published")
            memory, messages = settled(b, before_messages + 1)
            results[shape] = {"broker_messages": messages - before_messages, "memory_bytes": memory - before_memory}
            print(f"  envelopes {envelopes}, {shape}: {n:,} messages in {messages - before_messages:,} broker "
                  f"messages; level queues' memory +{(memory - before_memory) / 1e6:.1f} MB "
                  f"({(memory - before_memory) / n * 100_000 / 1e6:.1f} MB per 100,000 messages)", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--envelopes", default="off,on", help="the modes to measure, in turn")
    args = parser.parse_args()
    for envelopes in args.envelopes.split(","):
        run_mode(envelopes, args.messages)


if __name__ == "__main__":
    main()

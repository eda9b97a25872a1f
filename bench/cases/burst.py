"""Case 2, lateness under a burst: thousands of messages of 1-4 s through the bulk API at once, with
the broker's CPU over the run; against a hand-written kombu publisher into the same cascade (the
broker's own floor) and Celery native with as many producers as the API has clients."""

from __future__ import annotations

import threading
import time
import uuid

from bench.broker_cpu import broker_cpu
from bench.cases.base import now_ms
from bench.measure import percentiles
from harness.waiting import wait_until


def run(b, n: int | None = None, delays: tuple[int, int] = (1, 4), native: bool = True) -> dict:
    """20,000 messages of 1-4 s (or ``n`` of ``delays``) through the bulk API (4 clients), per
    version; the broker's CPU over the whole run (scheduled and delivered). Then the raw publisher
    into each version's cascade, and Celery native with 4 producers (the API's 4 clients)."""
    n = n or (5000 if b.quick else 20000)
    result = {"messages": n}
    for version in b.versions:
        endpoint = b.endpoint("burst", version)
        bodies = b.bodies(endpoint, [round(b.rng.uniform(*delays), 3) for _ in range(n)])
        with broker_cpu(b.broker_pid) as cpu:
            b.post(bodies)
            wait_until(lambda: b.count(endpoint, "delivered") >= n, 600, 0.2, "burst deliveries")
        result[version] = {**percentiles(b.lateness(endpoint)), "broker_cpu_s": cpu.seconds,
                           "broker_us_per_msg": cpu.per(n)}
        with broker_cpu(b.broker_pid) as cpu:
            raw = raw_burst(b, n, version, delays)
        result[f"raw_{version}"] = {**percentiles(raw), "broker_cpu_s": cpu.seconds,
                                    "broker_us_per_msg": cpu.per(n)}
    if not native:  # Celery native takes ~8 s per 1,000 here: a 100,000 burst would take a quarter hour
        return result
    with b.native_celery():
        ids, seconds = b.send_native([round(b.rng.uniform(1, 4), 3) for _ in range(n)], producers=4)
        wait_until(lambda: len(b.celery_lateness(ids)) >= n, 300, 0.5, "Celery native burst")
    result["native"] = {**percentiles(b.celery_lateness(ids)), "offered_per_s": n / seconds}
    return result


def raw_burst(b, n: int, version_name: str, delays: tuple[int, int] = (1, 4)) -> list[float]:
    """A hand-written kombu publisher (128 unconfirmed at most) into the version's cascade,
    and a consumer that notes arrival minus due: the broker's own floor for this burst."""
    return raw_floor(b, version_name, [[b.rng.randint(*delays) for _ in range(n)]])


def raw_floor(b, version_name: str, batches: list[list[int]], spacing_s: float = 0.0) -> list[float]:
    """The broker's floor for a load: each batch of whole-second delays published at once by a
    hand-written kombu publisher (128 unconfirmed at most), ``spacing_s`` apart, into the
    version's cascade; a kombu consumer notes arrival minus due. Lateness in ms."""
    from harness.endpoints import bind_endpoint
    from rabbit import Outgoing
    from scheduling.config.conf import broker
    from topology import cascade

    version = cascade.get_version(version_name)
    name, seen = f"raw-{version_name}-{uuid.uuid4().hex[:6]}", []
    n = sum(len(batch) for batch in batches)
    with broker().session() as setup:
        bind_endpoint(setup, version, name)
    done = threading.Event()

    def consume():
        with broker().session() as session:
            conn = session.conn  # kombu itself: the broker's floor, no platform code
            channel = conn.channel()
            channel.basic_qos(0, 2000, False)

            def on_message(message):
                seen.append(now_ms() - message.headers["due"])
                channel.basic_ack(message.delivery_tag)

            channel.basic_consume(name, callback=on_message)
            while len(seen) < n and not done.is_set():
                try:
                    conn.drain_events(timeout=1)
                except OSError:
                    pass

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    with broker().session() as session:
        for i, batch in enumerate(batches):
            if i:
                time.sleep(spacing_s)
            out = []
            for delay in batch:
                r = cascade.route(version, delay, name)
                out.append(Outgoing(r.exchange, r.routing_key, b"x",
                                    {"due": now_ms() + delay * 1000, **r.headers},
                                    {"message_id": uuid.uuid4().hex}))
            session.publish(out, window=128)
    longest = max((max(batch) for batch in batches if batch), default=0)
    thread.join(120 + n / 500 + longest)
    done.set()
    return seen

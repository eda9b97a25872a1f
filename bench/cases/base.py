"""What every case of `make bench` stands on: a ``Bench`` on a throwaway platform (harness/platform.py)
holds the load generator (bulk requests encoded before any clock starts, keep-alive clients), the
comparisons' Celery workers (a stock one and Celery native, started and purged per case), and the
samples (rows by status, lateness from the database, a worker's RSS). One random generator
serves the whole run, so the cases draw the same delays in the same order whichever module holds
them."""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from bench.broker_cpu import broker_pid
from harness.waiting import wait_until

CELERY_QUEUE = "bench-celery"


def now_ms() -> int:
    return int(time.time() * 1000)


class Bench:
    """The cases' client on platform ``p`` (harness.platform.Platform): ``quick`` for the smaller
    sizes, ``versions`` the cascade versions each case runs side by side."""

    def __init__(self, p, quick: bool, versions: tuple[str, ...], broker_process: int | None = None):
        self.p, self.quick, self.versions = p, quick, versions
        self.rng = random.Random(11)
        self.teams: dict[str, str] = {}  # other teams' keys (team_key)
        os.environ.update({k: v for k, v in p.env.items()
                           if k in ("DATABASE_URL", "BROKER_URL", "RABBITMQ_MANAGEMENT_URL", "SECRET_KEY",
                                    "DJANGO_SETTINGS_MODULE")})
        import django

        django.setup()
        from bench import celery_native
        from harness.testapp.tasks import started_at

        self.started_at, self.native = started_at, celery_native
        self.broker_pid = broker_process or broker_pid()  # the machine's node unless the platform is on another

    @contextmanager
    def plain_celery(self):
        """A stock Celery worker (delivery loop off) on CELERY_QUEUE for one case; stopped and its
        queue purged afterwards, so ETA tasks one case leaves behind cannot slow the next."""
        worker = self.p.start_worker(name="celery", concurrency=2, beat=False, DELAY_DELIVERY_LOOP="0",
                                     extra_args=("-Q", CELERY_QUEUE))
        try:
            yield worker
        finally:
            worker.stop(timeout=120)
            self._purge(CELERY_QUEUE)

    @contextmanager
    def native_celery(self):
        """A Celery worker of bench/celery_native.py: native delayed delivery on a quorum queue."""
        worker = self.p.start_worker(name="native", concurrency=2, beat=False, app="bench.celery_native",
                                     extra_args=("-Q", self.native.QUEUE))
        try:
            yield worker
        finally:
            worker.stop(timeout=120)
            self._purge(self.native.QUEUE)

    def _purge(self, queue: str) -> None:
        from scheduling.config.conf import broker

        with broker().session() as session:
            session.purge_queue(queue)

    def endpoint(self, kind: str, version: str, key: str | None = None, **fields) -> str:
        """A new endpoint of the bench's team (or of ``key``'s team), e.g. ``handler="webhook",
        handler_target=url``."""
        name = f"{kind}-{version}-{uuid.uuid4().hex[:6]}"
        self.api("POST", "/api/endpoints/", key, json={"name": name, "topology": version, **fields})
        return name

    def api(self, method: str, path: str, key: str | None = None, **kwargs):
        """The platform's API as the bench's team, or as ``key``'s (another team's key)."""
        if key is None:
            return self.p.api(method, path, **kwargs)
        response = self.p.session.request(method, self.p.url + path, timeout=120,
                                          headers={"Authorization": f"Bearer {key}"}, **kwargs)
        response.raise_for_status()
        return response.json()

    def cancel(self, endpoint: str, key: str | None = None, timeout: float = 60) -> int | None:
        """Best effort: cancel what the endpoint still has pending or published (a case's leftovers,
        so they do not weigh on the next case); how many, or None when the platform did not answer
        in time (an engine that calls inside the row's transaction holds its lock meanwhile)."""
        import time

        import requests

        headers = {"Authorization": f"Bearer {key or self.p.key}"}
        try:
            response = self.p.session.request(
                "POST", self.p.url + "/api/messages/cancel/", json={"endpoint": endpoint}, timeout=timeout,
                headers=headers)
            response.raise_for_status()
            job, deadline = response.json(), time.monotonic() + timeout
            while job["state"] == "running" and time.monotonic() < deadline:  # a job the worker runs
                time.sleep(0.2)
                job = self.p.session.get(job["status_url"], timeout=timeout, headers=headers).json()
            return job["done"] if job["state"] == "done" else None
        except requests.RequestException as exc:
            print(f"  (cancelling what {endpoint} has left failed: {exc})", flush=True)
            return None

    def team_key(self, team: str) -> str:
        """A key (every scope) of ``team``, made on first use: another team than the bench's."""
        if team not in self.teams:
            from harness.platform import team_with_key

            self.teams[team] = team_with_key(self.p.env, team)
        return self.teams[team]

    @staticmethod
    def bodies_due(endpoint: str, due: list[float]) -> list[bytes]:
        """Bulk requests of 1,000 messages due at these epoch seconds (``deliver_at``, ms)."""
        def at(epoch: float) -> str:
            return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch * 1000) % 1000:03d}Z"

        return [json.dumps({"messages": [{"endpoint": endpoint, "payload": {"n": i + j}, "deliver_at": at(d)}
                                         for j, d in enumerate(due[i:i + 1000])]}).encode()
                for i in range(0, len(due), 1000)]

    def due_at(self, endpoint: str) -> dict[str, float]:
        """Each of the endpoint's messages: id -> due time (epoch seconds)."""
        return {str(r[0]): float(r[1]) for r in self.p.sql(
            "SELECT m.id, EXTRACT(EPOCH FROM m.due_at) FROM scheduling_scheduledmessage m "
            "JOIN scheduling_endpoint e ON e.id = m.endpoint_id WHERE e.name = %s", endpoint)}

    @staticmethod
    def bodies(endpoint: str, delays: list[float]) -> list[bytes]:
        """Bulk requests of 1,000, encoded before any clock starts: the client's JSON is not
        the platform's cost."""
        return [json.dumps({"messages": [{"endpoint": endpoint, "payload": {}, "delay_seconds": d}
                                         for d in delays[i:i + 1000]]}).encode()
                for i in range(0, len(delays), 1000)]

    def post(self, bodies: list[bytes], clients: int = 4, key: str | None = None) -> list[bytes]:
        """The answers' bodies, unparsed, from ``clients`` keep-alive connections (http.client:
        the load generator shares these 2 cores, and requests' reading cost it ~50 µs a message);
        as the bench's team or as ``key``'s."""
        host, port = self.p.url.split("//")[1].split(":")
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key or self.p.key}"}
        local = threading.local()

        def one(body: bytes) -> bytes:
            if getattr(local, "conn", None) is None:
                local.conn = http.client.HTTPConnection(host, int(port), timeout=120)
            local.conn.request("POST", "/api/messages/bulk/", body, headers)
            response = local.conn.getresponse()
            answer = response.read()
            if response.status != 201:
                raise RuntimeError(f"bulk answered {response.status}: {answer[:300]!r}")
            return answer

        with ThreadPoolExecutor(clients) as pool:
            return list(pool.map(one, bodies))

    def schedule(self, endpoint: str, delays: list[float], clients: int = 4, key: str | None = None) -> list[str]:
        return [m["id"] for answer in self.post(self.bodies(endpoint, delays), clients, key)
                for m in json.loads(answer)["messages"]]

    def count(self, endpoint: str, status: str) -> int:
        return self.p.count_status(endpoint, status)

    def lateness(self, endpoint: str, due_from_s: float | None = None, due_to_s: float | None = None,
                 start: float | None = None) -> list[float]:
        rows = self.p.sql(
            "SELECT EXTRACT(EPOCH FROM m.delivered_at - m.due_at) * 1000, EXTRACT(EPOCH FROM m.due_at) "
            "FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e ON e.id = m.endpoint_id "
            "WHERE e.name = %s AND m.status = 'delivered'", endpoint)
        if due_from_s is None:
            return [float(r[0]) for r in rows]
        return [float(r[0]) for r in rows if start + due_from_s <= float(r[1]) < start + due_to_s]

    def celery_lateness(self, task_ids: list[str]) -> list[float]:
        rows = self.p.sql("SELECT payload FROM testapp_receipt WHERE message_id = ANY(%s)", task_ids)
        return [r[0]["started_ms"] - r[0]["due_ms"] for r in rows]

    def tree_rss_mb(self, worker) -> float:
        pids = [str(worker.process.pid)]
        pids += os.popen(f"pgrep -P {worker.process.pid}").read().split()
        total = 0
        for pid in pids:
            try:
                for line in open(f"/proc/{pid}/status"):
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                pass
        return total / 1024

    def warm_up(self) -> None:
        """Unmeasured: the first requests of each gunicorn process and the worker's first
        deliveries pay for imports, connections and caches (a first idle run was ~5x worse at p99)."""
        for version in self.versions:
            endpoint = self.endpoint("warm", version)
            for _ in range(4):
                self.schedule(endpoint, [1.0] * 100, clients=4)
            wait_until(lambda: self.count(endpoint, "delivered") >= 400, 120, 0.5, "warm-up deliveries")

    def send_native(self, delays: list[float], producers: int = 1) -> tuple[list[str], float]:
        """Celery native delayed delivery: ``apply_async(countdown=d)`` from ``producers``
        threads (each its own connection from Celery's pool). Returns task ids and send seconds."""
        task = self.native.native_started_at
        chunks = [delays[i::producers] for i in range(producers)]

        def send(chunk):
            return [task.apply_async(kwargs={"due_ms": now_ms() + int(d * 1000)}, countdown=d).id
                    for d in chunk]

        started = time.perf_counter()
        with ThreadPoolExecutor(producers) as pool:
            ids = [i for part in pool.map(send, chunks) for i in part]
        return ids, time.perf_counter() - started

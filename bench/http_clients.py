"""aiohttp or httpx for webhooks (issue 36 asks to measure both): a bare async client POSTing
small JSON bodies to the cheap local receiver (bench/receiver.py), keep-alive, ``concurrency``
calls in flight, each client in a process of its own. It prints calls a second (as the receiver
counts them, first to last call), the client's CPU per call (its process's, from
``time.process_time``) and the receiver's, for each client, and which client gives more calls per
CPU second.

    .venv/bin/python -m bench.http_clients [--calls 20000] [--concurrency 256] [--clients aiohttp,httpx]
                                           [--receivers 2]

The webhooks case (bench/cases/webhooks.py) runs the same comparison against its own receiver in
the same run as the platform: these calls a second are the floor the platform's webhooks are
judged against. Nothing else runs meanwhile; on these 2-core machines the client and the receiver
share the cores, so the figure is what one client process makes here, not the receiver's ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import uuid

from bench.receiver import Receiver, rate

CLIENTS = ("aiohttp", "httpx")


async def _aiohttp(url: str, calls: int, concurrency: int, bodies: list[bytes], ids: list[str]) -> int:
    import aiohttp

    failed = 0
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
        todo = iter(range(calls))

        async def worker():
            nonlocal failed
            for i in todo:
                async with session.post(url, data=bodies[i], headers={
                        "content-type": "application/json", "webhook-id": ids[i]}) as response:
                    await response.read()
                    failed += response.status != 200

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failed


async def _httpx(url: str, calls: int, concurrency: int, bodies: list[bytes], ids: list[str]) -> int:
    import httpx

    failed = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        todo = iter(range(calls))

        async def worker():
            nonlocal failed
            for i in todo:
                response = await client.post(url, content=bodies[i], headers={
                    "content-type": "application/json", "webhook-id": ids[i]})
                failed += response.status_code != 200

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failed


def one(client: str, url: str, calls: int, concurrency: int) -> dict:
    """In this process: ``calls`` POSTs by ``client``; seconds, CPU seconds, failures."""
    bodies = [json.dumps({"n": i, "event": "bench", "payload": {"invoice": i}}).encode()
              for i in range(calls)]
    ids = [str(uuid.uuid4()) for _ in range(calls)]
    run = {"aiohttp": _aiohttp, "httpx": _httpx}[client]
    cpu, wall = time.process_time(), time.perf_counter()
    failed = asyncio.run(run(url, calls, concurrency, bodies, ids))
    return {"client": client, "calls": calls, "seconds": time.perf_counter() - wall,
            "cpu_s": time.process_time() - cpu, "failed": failed}


def measure(receiver: Receiver, client: str, calls: int, concurrency: int = 256) -> dict:
    """One client against ``receiver`` (in a process of its own): calls a second first to last call
    as the receiver saw them, the client's and the receiver's CPU per call (µs)."""
    receiver.reset()
    before = receiver.cpu_seconds()
    done = subprocess.run([sys.executable, "-m", "bench.http_clients", "--one", client, "--url", receiver.url,
                           "--calls", str(calls), "--concurrency", str(concurrency)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"{client} client failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.splitlines()[-1])
    receiver_cpu = receiver.cpu_seconds() - before
    times = [t for t, _ in receiver.arrivals()]
    connections = receiver.status()["connections"]
    return {**result, "connections": connections, "received": len(times), "calls_per_s": rate(times),
            "client_us_per_call": result["cpu_s"] * 1e6 / calls,
            "receiver_cpu_s": receiver_cpu, "receiver_us_per_call": receiver_cpu * 1e6 / max(1, len(times))}


def compare(receiver: Receiver, calls: int, concurrency: int = 256, clients=CLIENTS) -> dict:
    return {client: measure(receiver, client, calls, concurrency) for client in clients}


def describe(results: dict) -> list[str]:
    lines = [f"  {c:8} {r['calls_per_s'] or 0:>9,.0f} calls/s  client {r['client_us_per_call']:5.0f} µs CPU a call"
             f"  receiver {r['receiver_us_per_call'] / 1000:.3f} CPU s per 1,000 calls; "
             f"{r['received']:,} received over {r['connections']} connections, {r['failed']} failed"
             for c, r in results.items()]
    if {"aiohttp", "httpx"} <= set(results):
        one, two = sorted(results.items(), key=lambda item: item[1]["client_us_per_call"])
        per_cpu = two[1]["client_us_per_call"] / one[1]["client_us_per_call"]
        per_second = (one[1]["calls_per_s"] or 0) / max(1, two[1]["calls_per_s"] or 0)
        lines.append(f"  {one[0]}: {per_cpu:.1f}x the calls per CPU second of {two[0]} ({per_second:.1f}x the calls "
                     "a second)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--receivers", type=int, default=2, help="receiver processes sharing the port")
    parser.add_argument("--one", choices=CLIENTS, help=argparse.SUPPRESS)  # a client's own process
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.url, args.calls, args.concurrency)))
        return
    with Receiver(processes=args.receivers) as receiver:
        measure(receiver, "aiohttp", min(2000, args.calls), args.concurrency)  # warm-up, unreported
        results = compare(receiver, args.calls, args.concurrency, args.clients.split(","))
    print(f"{args.calls:,} POSTs of small JSON bodies, {args.concurrency} in flight, keep-alive, "
          f"to {args.receivers} receiver process(es) answering 200 at once:")
    print("\n".join(describe(results)))


if __name__ == "__main__":
    main()

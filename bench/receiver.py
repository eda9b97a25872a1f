"""A cheap local webhook receiver for the benchmarks: N processes of a raw-asyncio HTTP/1.1 server
sharing one port (SO_REUSEPORT), each answering every POST with ``200`` and an empty body on a
kept-alive connection, and noting when each call came and its ``webhook-id`` (the platform's
message id; Standard Webhooks). It is meant not to be the bottleneck: ``cpu_seconds`` is what its
processes have cost (from /proc), so a case can say what the receiver spent per 1,000 calls.

Modes (``mode``, changeable while it runs: ``set_mode``):

- ``ok``: answer at once;
- ``slow``: answer each call after ``hold_s`` seconds (a slow receiver; calls in flight counted);
- ``tarpit``: take the request, then send one byte of a response that never ends every
  ``trickle_s`` seconds, and never finish (the connection is held until the client drops it).

Each process is ``python -m bench.receiver --port P --mode M`` driven over its stdin/stdout, one
command and one JSON line each: ``count``, ``report`` (arrival times and ids), ``reset``,
``mode M [hold_s]``, ``quit``. Requests with ``Transfer-Encoding: chunked`` are not understood
(the platform and the bench clients send ``Content-Length``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

from bench.broker_cpu import processes_cpu_seconds

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
# what the tarpit trickles, a byte at a time: a status line, then a header that never ends
TARPIT = b"HTTP/1.1 200 OK\r\nX-Trickle: " + b"a" * 1_000_000


class _State:
    def __init__(self, mode: str, hold_s: float, trickle_s: float):
        self.mode, self.hold_s, self.trickle_s = mode, hold_s, trickle_s
        self.times: list[float] = []
        self.ids: list[str] = []
        self.in_flight = self.most_in_flight = 0
        self.connections = 0


class _Http(asyncio.Protocol):
    """One connection: requests parsed from the bytes as they come (pipelining allowed), each
    answered per the process's mode."""

    def __init__(self, state: _State):
        self.state, self.buffer, self.transport, self.trickle, self.held = state, b"", None, None, False

    def connection_made(self, transport):
        self.transport = transport
        self.state.connections += 1

    def connection_lost(self, exc):
        if self.trickle is not None:
            self.trickle.cancel()
        if self.held:
            self.state.in_flight -= 1

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        answers = 0
        state = self.state
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buffer[:end].lower()
            length = 0
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at + 17)
                length = int(head[at + 17:stop if stop >= 0 else None])
            if len(buffer) < end + 4 + length:
                break
            at = head.find(b"\r\nwebhook-id:")
            if at >= 0:
                stop = head.find(b"\r\n", at + 13)
                state.ids.append(head[at + 13:stop if stop >= 0 else None].strip().decode())
            else:
                state.ids.append("")
            state.times.append(time.time())
            buffer = buffer[end + 4 + length:]
            answers += 1
        self.buffer = buffer
        if not answers:
            return
        if state.mode == "ok":
            self.transport.write(RESPONSE * answers)
        elif state.mode == "slow":
            loop = asyncio.get_running_loop()
            for _ in range(answers):
                state.in_flight += 1
                state.most_in_flight = max(state.most_in_flight, state.in_flight)
                loop.call_later(state.hold_s, self._answer)
        elif not self.held:  # tarpit: one never-ending answer per connection
            self.held = True
            state.in_flight += 1
            state.most_in_flight = max(state.most_in_flight, state.in_flight)
            self._trickle(0)

    def _answer(self) -> None:
        self.state.in_flight -= 1
        if not self.transport.is_closing():
            self.transport.write(RESPONSE)

    def _trickle(self, sent: int) -> None:
        self.trickle = None
        if self.transport.is_closing():
            return
        self.transport.write(TARPIT[sent:sent + 1])
        self.trickle = asyncio.get_running_loop().call_later(self.state.trickle_s, self._trickle, sent + 1)


async def _serve(port: int, mode: str, hold_s: float, trickle_s: float) -> None:
    state = _State(mode, hold_s, trickle_s)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(4096)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Http(state), sock=sock)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout

    def say(obj) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    say({"ready": os.getpid()})
    while line := (await reader.readline()).decode().split():
        command = line[0]
        if command == "count":
            say({"count": len(state.times), "in_flight": state.in_flight, "most_in_flight": state.most_in_flight,
                 "connections": state.connections})
        elif command == "report":
            say({"times": state.times, "ids": state.ids, "most_in_flight": state.most_in_flight,
                 "connections": state.connections})
        elif command == "reset":
            state.times, state.ids = [], []
            state.most_in_flight, state.connections = state.in_flight, 0
            say({"reset": True})
        elif command == "mode":
            state.mode = line[1]
            if len(line) > 2:
                state.hold_s = float(line[2])
            say({"mode": state.mode})
        elif command == "quit":
            break
    server.close()


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (/proc/<pid>/stat)."""
    return processes_cpu_seconds(pids)


class Receiver:
    """``processes`` receiver processes on one port of 127.0.0.1 (``url``), in ``mode``."""

    def __init__(self, mode: str = "ok", processes: int = 2, hold_s: float = 0.2, trickle_s: float = 5.0):
        self.mode, self.processes, self.hold_s, self.trickle_s = mode, processes, hold_s, trickle_s
        self.children: list[subprocess.Popen] = []
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    @property
    def pids(self) -> list[int]:
        return [c.pid for c in self.children]

    def __enter__(self) -> Receiver:
        # a bound, non-listening socket holds the port while the processes bind it too
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind(("127.0.0.1", 0))
        self.port = holder.getsockname()[1]
        try:
            for _ in range(self.processes):
                child = subprocess.Popen(
                    [sys.executable, "-m", "bench.receiver", "--port", str(self.port), "--mode", self.mode,
                     "--hold", str(self.hold_s), "--trickle", str(self.trickle_s)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
                self.children.append(child)
            for child in self.children:
                line = child.stdout.readline()
                if "ready" not in line:
                    raise RuntimeError(f"receiver did not start: {line!r}")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        finally:
            holder.close()
        return self

    def __exit__(self, *exc) -> None:
        for child in self.children:
            try:
                child.stdin.write("quit\n")
                child.stdin.flush()
            except OSError:
                pass
        for child in self.children:
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)
        self.children = []

    def _ask(self, command: str) -> list[dict]:
        for child in self.children:
            child.stdin.write(command + "\n")
            child.stdin.flush()
        return [json.loads(child.stdout.readline()) for child in self.children]

    def count(self) -> int:
        return sum(r["count"] for r in self._ask("count"))

    def status(self) -> dict:
        """Calls so far, in flight now, the most in flight at once (summed over processes: an
        upper bound of the true peak) and connections accepted."""
        answers = self._ask("count")
        return {k: sum(r[k] for r in answers) for k in ("count", "in_flight", "most_in_flight", "connections")}

    def arrivals(self) -> list[tuple[float, str]]:
        """(epoch seconds, webhook-id) of every call since the last reset, in time order."""
        out = []
        for report in self._ask("report"):
            out += zip(report["times"], report["ids"])
        return sorted(out)

    def reset(self) -> None:
        self._ask("reset")

    def set_mode(self, mode: str, hold_s: float | None = None) -> None:
        self._ask(f"mode {mode}" + (f" {hold_s}" if hold_s is not None else ""))

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pids)


def rate(times: list[float]) -> float | None:
    """Calls a second from the first to the last call."""
    if len(times) < 2 or times[-1] <= times[0]:
        return None
    return (len(times) - 1) / (times[-1] - times[0])


def main() -> None:
    parser = argparse.ArgumentParser(description="one receiver process (driven over stdin by Receiver)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=("ok", "slow", "tarpit"), default="ok")
    parser.add_argument("--hold", type=float, default=0.2)
    parser.add_argument("--trickle", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(_serve(args.port, args.mode, args.hold, args.trickle))


if __name__ == "__main__":
    main()

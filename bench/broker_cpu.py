"""The broker's own CPU time, read from the node itself: what a message costs RabbitMQ (the
Erlang VM's user + system time from /proc; the node runs on this machine). And the same of any
processes of this machine (``processes_cpu_seconds``: the platform's parts, the receivers).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass

TICKS = os.sysconf("SC_CLK_TCK")


def broker_pid(node: str | None = None) -> int:
    args = ["rabbitmqctl", "-q", *(("-n", node) if node else ()), "eval", "os:getpid()."]
    return int(subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout.strip().strip('"'))


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of stat)


def processes_cpu_seconds(pids: Iterable[int], *, children: bool = False) -> float:
    """User + system CPU seconds of these processes so far; with ``children``, also of their
    children that have exited (a PostgreSQL backend that ended is counted in the postmaster's).
    A process gone already counts nothing."""
    total = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15 if children else 13])  # utime, stime (, cutime, cstime)
    return total / TICKS


@dataclass
class CpuSpan:
    seconds: float = 0.0

    def per(self, messages: int) -> float | None:
        """Microseconds of broker CPU per message."""
        return self.seconds * 1e6 / messages if messages else None


@contextmanager
def broker_cpu(pid: int):
    """``with broker_cpu(pid) as span: ...`` then ``span.seconds``."""
    span, started = CpuSpan(), cpu_seconds(pid)
    try:
        yield span
    finally:
        span.seconds = cpu_seconds(pid) - started

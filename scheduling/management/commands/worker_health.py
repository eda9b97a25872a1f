"""Is this host's Celery worker healthy? For docker-compose's and Kubernetes' health checks.

Asks the worker through Celery's remote control (the ``dp_health`` command, scheduling/worker/bootstep.py)
and exits 0 when it answers and its delivery loop turned within ``--stale-after`` seconds;
otherwise exits 1 with one line saying what is wrong. An answer proves the worker's consumer
(its broker connection and main thread) is alive, which ``celery inspect ping`` also does; the
loop's state is what ping cannot see: a delivery loop that died or hangs stops deliveries while
the worker still answers pings.
"""

from __future__ import annotations

import socket

from celery import current_app
from django.core.management.base import BaseCommand, CommandError


def problem(node: str, replies: list[dict], stale_after: float) -> str | None:
    """What is wrong with the worker's answer, or None when it is healthy."""
    answer = next((reply[node] for reply in replies if node in reply), None)
    if answer is None:
        return f"{node} did not answer (not running, or not connected to the broker)"
    if "error" in answer:
        return f"{node} cannot tell its health: {answer['error']}"
    loop = answer.get("loop")
    if loop == "off":  # DELAY_DELIVERY_LOOP=0: a worker of ordinary tasks only
        return None
    if loop != "running":
        return f"{node}: delivery loop {loop}"
    if not answer.get("connected"):
        return f"{node}: delivery loop not connected to the broker"
    if answer.get("idle_seconds", 0) > stale_after:
        return f"{node}: delivery loop stuck (last turn {answer['idle_seconds']:.0f} s ago)"
    return None


class Command(BaseCommand):
    help = "Exit 0 if this host's worker answers and its delivery loop runs; else 1, with one line."
    requires_system_checks = []  # a probe: no checks, no database

    def add_arguments(self, parser):
        parser.add_argument("--node", default=f"celery@{socket.gethostname()}",
                            help="the worker's node name (celery worker -n); default: celery@<this host>")
        parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer")
        parser.add_argument("--stale-after", type=float, default=30.0,
                            help="unhealthy when the delivery loop has not turned for this many seconds")

    def handle(self, *args, node, timeout, stale_after, **options):
        try:
            replies = current_app.control.broadcast("dp_health", destination=[node], reply=True,
                                                    timeout=timeout, limit=1) or []
        except Exception as exc:  # the broker itself is away: kombu's errors, whichever they are
            raise CommandError(f"cannot ask {node}: {type(exc).__name__}: {exc}") from None
        wrong = problem(node, replies, stale_after)
        if wrong:
            raise CommandError(wrong)
        answer = next(reply[node] for reply in replies if node in reply)
        self.stdout.write(f"{node} ok: delivery loop {answer.get('loop')}"
                          + (f", {answer['consuming']} queue(s)" if "consuming" in answer else "")
                          + (f"; loop processes {answer['loop_processes']}" if "loop_processes" in answer else ""))

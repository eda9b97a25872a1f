"""What tracing costs a message, in µs, on the code paths it touches: schedule (the row built, the
schedule span), publish (the relay's broker message built, the publish span) and deliver (the copy
read back, the deliver span, what a handler task is handed; a webhook's attempt span and header). No
database or broker: the same functions the platform runs, on unsaved rows, so the figure is the CPU
a message pays, not I/O.

Four ways, each ``--messages`` times, best of ``--runs``:

- bypassed: the tracing hooks replaced by nothing (what the code did before tracing);
- off: tracing off (the default), the message without a traceparent;
- off + traceparent: off, the caller's traceparent kept and passed on as it came;
- on: tracing on, spans built and exported over OTLP/HTTP to a local receiver that drops them.

    .venv/bin/python -m bench.tracing_cost [--messages 20000] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "delayplatform.settings_test")

import django  # noqa: E402

django.setup()

from uuid_utils.compat import uuid7  # noqa: E402

from rabbit import Received  # noqa: E402
from scheduling.core.clock import to_epoch_ms  # noqa: E402
from scheduling.delivery.services import Outcome, Result  # noqa: E402
from scheduling.messages import wire  # noqa: E402
from scheduling.messages.services import _schedule_spans  # noqa: E402 (the service's own tracing hook)
from scheduling.models import Endpoint, ScheduledMessage, TopologyVersion  # noqa: E402
from scheduling.models.teams import Team  # noqa: E402
from scheduling.observability import tracing  # noqa: E402
from scheduling.worker.holding import Held  # noqa: E402
from scheduling.worker.traces import Traces  # noqa: E402
from topology import cascade  # noqa: E402

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
NOW = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)
ENDPOINT = Endpoint(pk=1, team=Team(pk=1, name="bench"), name="orders", queue="orders",
                    topology=TopologyVersion(pk=1, name="v3", prefix="dp.v3.", levels=28))


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that reads each export and drops it."""

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def _traces() -> Traces:
    """The delivery loop's tracing part (worker/traces.py), without its thread, broker or engine."""
    traces = Traces()
    traces.labels = {"orders": ("bench", "orders")}
    return traces


def one_message(traces: Traces, traceparent: str | None, bypass: bool) -> None:
    """Schedule, publish and deliver one message, with a webhook's headers, as the platform does."""
    row = ScheduledMessage.new(id=uuid7(), endpoint=ENDPOINT, payload={"n": 1}, due_at=NOW + timedelta(seconds=5),
                               requested_delay_ms=5000, traceparent=traceparent)
    spans = _schedule_spans([row]) if tracing.ENABLED and not bypass else None
    if spans:
        tracing.schedule_end(spans, [row], "scheduled")
    if tracing.ENABLED and not bypass:
        tracing.publish_prepare([row])
    out, route = wire.outgoing(row, cascade.V3, NOW, margin_ms=250)
    row.routing_key, row.first_exchange = route.routing_key, route.exchange
    if tracing.ENABLED and not bypass:
        tracing.publish_end([row], "published")
    received = Received(tag=1, body=out.body, headers=out.headers, exchange="dp.v3.delay-delivery",
                        routing_key="orders", queue="orders")
    (delivery,) = wire.read_deliveries(received.headers, received.body, to_epoch_ms(NOW))
    held = Held(delivery.due_ms, 1, received, delivery)
    headers = {}
    if not bypass:  # what a handler task would be handed (the loop does this or the webhook's: both, an upper bound)
        traces.handed([held])
    if not bypass and (received.headers.get(wire.H_TRACEPARENT) or received.headers.get(wire.H_TRACEPARENTS)):
        traces.call(held, SimpleNamespace(attempt=0), SimpleNamespace(url="http://127.0.0.1/hook"), headers)
        if tracing.ENABLED:  # the call ended (the engine's result)
            tracing.attempt_end(traces.spans[delivery.message_id][1], outcome="ok", status_code=200,
                                started_s=time.time(), duration_ms=1)
    if tracing.ENABLED and not bypass:
        traces.settled([(held, Outcome(Result.DELIVERED))])


def run_us(mode: str, messages: int) -> float:
    """One run of ``messages``: µs per message."""
    traces = _traces()
    traceparent = TRACEPARENT if mode in ("off + traceparent", "on") else None
    bypass = mode == "bypassed"
    started = time.perf_counter()
    for _ in range(messages):
        one_message(traces, traceparent, bypass)
    return (time.perf_counter() - started) / messages * 1e6


def best_us(modes: tuple[str, ...], messages: int, runs: int) -> dict[str, float]:
    """The modes' runs interleaved (a busy machine's noise falls on each alike), after a warm-up
    run each; the best run of each."""
    for mode in modes:
        run_us(mode, messages // 10)
    best = dict.fromkeys(modes, float("inf"))
    for _ in range(runs):
        for mode in modes:
            best[mode] = min(best[mode], run_us(mode, messages))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    figures = best_us(("bypassed", "off", "off + traceparent"), args.messages, args.runs)
    tracing.tracing_start(SimpleNamespace(
        otel_exporter_otlp_endpoint=f"http://127.0.0.1:{sink.server_port}", otel_exporter_otlp_traces_endpoint="",
        otel_traces_exporter="", otel_service_name="bench"))
    figures.update(best_us(("on",), args.messages, args.runs))
    tracing.tracing_flush()
    sink.shutdown()
    base = figures["bypassed"]
    print(f"schedule + publish + deliver, per message ({args.messages:,} messages, best of {args.runs}):")
    print(f"{'tracing':<20} {'µs/message':>11} {'vs bypassed':>12}")
    for mode, us in figures.items():
        print(f"{mode:<20} {us:>11.1f} {us - base:>+11.1f}")


if __name__ == "__main__":
    main()

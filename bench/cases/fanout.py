"""Case 9, fan-out (issue 48): an event to N subscribers crosses the cascade as one broker message
and fans out at the far end (docs/concepts/fan-out.md). Fan-out 1 and 50, each beside the same
load sent as separate messages (N messages per event through the cascade): the broker's CPU per
event and per delivered message, the broker messages the relay sent, and delivery p99.

The events are made in this process as the events service makes them (harness/events.py: an
Event row and its messages through the scheduling service; the relay here publishes after each
commit), one transaction per event, from a few paced threads: the same path for both loads, so
what differs is only whether the rows name their event. The issue's target is 1,000 events/s; on
these 2 cores 50 x 1,000 = 50,000 deliveries/s cannot be carried, so fan-out 50 runs at the rates
given and the case reports the rate each reached and how busy the machine was."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from bench.broker_cpu import broker_cpu
from bench.measure import percentiles
from harness.waiting import wait_until

DELAY_S = 7.5  # every event's delay: 7 units after the margin (3 levels, as a short real delay), short enough to drain fast


def _endpoints(b, version: str, count: int) -> list:
    from scheduling.models import Endpoint

    names = [b.endpoint("fan", version) for _ in range(count)]
    return list(Endpoint.objects.select_related("team", "topology").filter(name__in=names).order_by("name"))


def _counted(version: str) -> tuple[float, float]:
    from prometheus_client import REGISTRY

    return tuple(REGISTRY.get_sample_value(f"delay_relay_{name}_total", {"version": version}) or 0.0
                 for name in ("published", "broker_messages"))


def _produce(targets: list, events: int, per_s: float, *, as_event: bool, threads: int = 6) -> float:
    """``events`` events to ``targets``, paced at ``per_s`` (as fast as possible when behind), from
    ``threads`` threads, one transaction each; returns the seconds it took."""
    from django.db import connections
    from django.utils import timezone

    from harness.events import schedule_event

    lock, next_k, started = threading.Lock(), [0], time.monotonic()

    def work():
        try:
            while True:
                with lock:
                    k = next_k[0]
                    next_k[0] += 1
                if k >= events:
                    return
                wait = started + k / per_s - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                schedule_event(endpoints=targets, payload={"k": k}, event=as_event,
                               deliver_at=timezone.now() + timedelta(seconds=DELAY_S))
        finally:
            connections.close_all()

    pool = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return time.monotonic() - started


def _cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of the machine so far (/proc/stat): how busy it was over a whole load."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)


def _lateness(b, targets: list, since) -> list[float]:
    rows = b.p.sql(
        "SELECT EXTRACT(EPOCH FROM delivered_at - due_at) * 1000 FROM scheduling_scheduledmessage "
        "WHERE endpoint_id = ANY(%s) AND status = 'delivered' AND created_at >= %s",
        [t.id for t in targets], since)
    return [float(r[0]) for r in rows]


def _fanned_out_at(b, targets: list, since) -> list[float]:
    """When each event's rows were fanned out (their last stamp), ms after due (negative: before)."""
    rows = b.p.sql(
        "SELECT EXTRACT(EPOCH FROM published_at - due_at) * 1000 FROM scheduling_scheduledmessage "
        "WHERE endpoint_id = ANY(%s) AND event_id IS NOT NULL AND created_at >= %s", [t.id for t in targets], since)
    return [float(r[0]) for r in rows if r[0] is not None]


def _delivered(b, targets: list, since) -> int:
    return b.p.sql("SELECT count(*) FROM scheduling_scheduledmessage WHERE endpoint_id = ANY(%s) "
                   "AND status = 'delivered' AND created_at >= %s", [t.id for t in targets], since)[0][0]


def one(b, targets: list, per_s: float, seconds: float, *, as_event: bool, version: str) -> dict:
    """One load: ``per_s`` events a second for ``seconds`` to every endpoint of ``targets``."""
    from django.utils import timezone

    events = max(1, int(per_s * seconds))
    n = events * len(targets)
    since = timezone.now()
    rows_before, messages_before = _counted(version)
    with broker_cpu(b.broker_pid) as cpu:
        idle_before = _cpu_times()
        took = _produce(targets, events, per_s, as_event=as_event)
        wait_until(lambda: _delivered(b, targets, since) >= n, 300 + n / 1000, 0.2, "fan-out deliveries")
        idle_after = _cpu_times()
    busy = {"idle": (idle_after[0] - idle_before[0]) / max(1, idle_after[1] - idle_before[1])}
    rows_after, messages_after = _counted(version)
    late = _lateness(b, targets, since)
    fanned = _fanned_out_at(b, targets, since) if as_event and len(targets) > 1 else []
    return {"events": events, "messages": n, "events_per_s_asked": per_s, "events_per_s": round(events / took, 1),
            "deliveries_per_s": round(n / took, 1), "broker_cpu_s": round(cpu.seconds, 3),
            "broker_us_per_event": cpu.per(events), "broker_us_per_message": cpu.per(n),
            "relay_rows": rows_after - rows_before, "cascade_messages": messages_after - messages_before,
            "machine_busy": round(1 - busy.get("idle", 1.0), 2), **percentiles(late),
            "early": sum(1 for ms in late if ms < 0),
            **({"fanned_out_after_due_ms": percentiles(fanned)} if fanned else {})}


def run(b, version: str = "v3", rates: tuple[tuple[int, float], ...] | None = None) -> dict:
    """Fan-out 1 at 1,000 events/s asked, fan-out 50 at each rate of ``rates`` (events/s), each as
    events and as separate messages. ``b.quick``: shorter loads and fewer rates."""
    seconds = 4.0 if b.quick else 10.0
    rates = rates or (((1, 1000.0), (50, 20.0)) if b.quick else ((1, 1000.0), (50, 20.0), (50, 40.0), (50, 60.0), (50, 80.0), (50, 100.0)))
    endpoints = _endpoints(b, version, max(fan for fan, _ in rates))
    # unmeasured: a message to each new endpoint, delivered, so the worker's loops consume every queue
    one(b, endpoints, 1.0, 1.0, as_event=False, version=version)
    result = {}
    for fan, per_s in rates:
        targets = endpoints[:fan]
        for mode, as_event in (("event", True), ("separate", False)):
            result[f"{mode}_{fan}x{int(per_s)}"] = one(b, targets, per_s, seconds, as_event=as_event, version=version)
    return result

"""The platform's Prometheus metrics: every definition here, and the few functions the services,
the delivery loop and the Celery task claim call to count (docs/observability/metrics.md lists them all).

Counted where the event is decided, once its transaction has committed: a delivery batch that
rolls back is tried again and must not count twice. Each process counts its own (the web server's
gunicorn workers, a Celery worker's main process with the delivery loop and its prefork
children); with ``PROMETHEUS_MULTIPROC_DIR`` set they are summed at scrape time
(metrics_http.py). Labels are names (team, endpoint, version), looked up once per process: none of
them ever changes. An endpoint's name is unique only within its team, hence the team.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections import Counter as Tally
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

from django.db import DatabaseError, transaction
from prometheus_client import Counter, Gauge, Histogram

from scheduling.core import lifecycle
from scheduling.core.lifecycle import Arrival
from scheduling.observability import label_names

log = logging.getLogger(__name__)

BY_MESSAGE = ("team", "endpoint", "version")
# 1 ms to 1 h: a healthy cascade is a few ms late, a busy one seconds; beyond an hour is an outage.
LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    300.0, 900.0, 1800.0, 3600.0)

DELIVERIES = Counter(
    "delay_deliveries", "Messages handed to their endpoint (the first delivery of each).", BY_MESSAGE)
LATENESS = Histogram(
    "delay_delivery_lateness_seconds", "How late each delivery was, from the later of its due time and "
    "the time it was accepted, less its wait for its endpoint's flow control.", BY_MESSAGE, buckets=LATENESS_BUCKETS)
THROTTLED = Counter(
    "delay_throttled", "Deliveries that waited for their endpoint's flow control (max_deliveries_per_second, "
    "max_concurrent, and their per-key forms).", BY_MESSAGE)
THROTTLE_WAIT = Histogram(
    "delay_throttle_wait_seconds", "How long each throttled delivery waited for its endpoint's flow control.",
    BY_MESSAGE, buckets=LATENESS_BUCKETS)
DUPLICATES = Counter(
    "delay_duplicates_suppressed", "Copies of already delivered messages dropped on arrival.", BY_MESSAGE)
CANCELLED_ARRIVALS = Counter(
    "delay_cancelled_arrivals", "Cancelled messages dropped when they arrived.", BY_MESSAGE)
SUPERSEDED = Counter(
    "delay_superseded_copies", "Copies for a due time a rescheduled message no longer has, dropped.", BY_MESSAGE)
EXPIRED = Counter(
    "delay_messages_expired", "Messages that reached their expires_at before they were handed over: ended expired, "
    "never delivered nor retried (on arrival, the relay's publish, a handler's retry).", BY_MESSAGE)
MESSAGES_SUPERSEDED = Counter(
    "delay_messages_superseded", "Messages that ended superseded, never delivered: replaced by a newer one with "
    "their debounce key (trailing), or scheduled within a leading debounce window.", BY_MESSAGE)
ORDERING_WAITS = Counter(
    "delay_ordering_waits", "Copies of keyed messages that came before their ordering key's turn: acked, the "
    "message set waiting until the one before it ends.", BY_MESSAGE)
ORDERING_WAKES = Counter(
    "delay_ordering_wakes", "Waiting messages woken (pending again) because the message of their ordering key "
    "before them ended, or by the ordering sweep.")
SCHEDULE_RUNS_OVERLAP_SKIPPED = Counter(
    "delay_schedule_runs_overlap_skipped", "Recurring schedules' runs not sent because the schedule's previous run "
    "had not ended (overlap skip, or buffer_one with a run already waiting): ended skipped.", BY_MESSAGE)
RESCHEDULES = Counter(
    "delay_reschedules", "Messages moved to another due time (PATCH, admin).", BY_MESSAGE)
HANDLER_FAILURES = Counter(
    "delay_handler_failures", "Handler attempts that failed (webhook, Celery task send).", BY_MESSAGE)
HANDLER_RETRIES = Counter(
    "delay_handler_retries", "Failed handler attempts followed by another attempt.", BY_MESSAGE)
CANCELLATIONS = Counter(
    "delay_cancellations", "Messages cancelled (API, admin, command, cancel_task).", BY_MESSAGE)
SCHEDULED_IN_PAST = Counter(
    "delay_scheduled_in_past", "Messages accepted with a due time before their acceptance.", BY_MESSAGE)
RELAY_PUBLISHED = Counter(
    "delay_relay_published", "Rows the relay published into a cascade (broker confirmed).", ("version",))
RELAY_BROKER_MESSAGES = Counter(
    "delay_relay_broker_messages", "Broker messages the relay published into a cascade (confirmed): an envelope "
    "counts once, however many rows it carries.", ("version",))
FANNED_OUT = Counter(
    "delay_fanned_out_messages", "Messages the delivery loops published to their endpoints from an event's one "
    "copy in the cascade (docs/concepts/fan-out.md), confirmed.")
RELAY_FAILURES = Counter(
    "delay_relay_failures", "Rows the relay could not publish (left pending for the sweeper).", ("version",))
RESCUED = Counter(
    "delay_rescued", "Overdue messages still in the broker that the delivery loop published again "
    "to their delivery exchange.", BY_MESSAGE)
MISROUTED = Counter(
    "delay_misrouted_copies", "Broker messages naming a message of another endpoint than the queue they came "
    "from (a forged or misplaced copy): dropped, never delivered; labelled by that queue.", ("queue",))
ORPHANED = Counter(
    "delay_orphan_copies", "Copies naming no row (e.g. scheduled after the backup a database was restored "
    "from): set aside for the operator (orphan copies), never delivered; labelled by the queue they came from.",
    ("queue",))
ORPHANS_DROPPED = Counter(
    "delay_orphan_copies_dropped", "Copies naming no row acked without being set aside, because their queue "
    "already keeps its bound of orphan copies (a flood of made-up ids); labelled by that queue.", ("queue",))
QUOTA_USAGE = Gauge(
    "delay_team_quota_usage_ratio", "A team's use of a count quota (endpoints, schedules, messages_in_flight) "
    "when last checked, as a share of the quota; a warning is logged from 0.8.", ("team", "quota"),
    multiprocess_mode="mostrecent")
QUOTA_REFUSALS = Counter(
    "delay_team_quota_refusals", "Requests refused for a team's count quota.", ("team", "quota"))
EVENTS = Counter(
    "delay_events", "Events published (issue 48), by team and whether any subscription matched (matched yes|no); "
    "an idempotent replay is not counted again.", ("team", "matched"))
HELD = Gauge(
    "delay_delivery_loop_held_messages", "Messages the delivery loop holds until they are due.",
    multiprocess_mode="livesum")

@dataclass(frozen=True)
class Counted:
    """One event of a message (``row``: anything with endpoint_id and topology_id)."""

    metric: Counter
    row: object
    lateness_ms: int | None = None
    throttled_ms: int | None = None  # of the lateness, the wait for flow control


def record(events: list[Counted]) -> None:
    """Count the events now (outside a transaction, or from on_commit). Counting never fails the
    work it counts: without the names (database away) the ids stand in as labels. One call per
    metric and labels, whatever the number of events (observe_many for the histograms)."""
    if not events:
        return
    _learn([e.row for e in events])
    tally = Tally()
    late, waits = defaultdict(list), defaultdict(list)
    for event in events:
        labels = label_names.of(event.row)
        tally[(event.metric, labels)] += 1
        waited = event.throttled_ms or 0
        if event.lateness_ms is not None:  # never early by design; an early one counts as on time
            late[labels].append(max(event.lateness_ms - waited, 0) / 1000)
        if waited:
            tally[(THROTTLED, labels)] += 1
            waits[labels].append(waited / 1000)
    for (metric, labels), n in tally.items():
        metric.labels(*labels).inc(n)
    for labels, values in late.items():
        observe_many(LATENESS.labels(*labels), values)
    for labels, values in waits.items():
        observe_many(THROTTLE_WAIT.labels(*labels), values)


def misrouted(queues: list[str]) -> None:
    """Count copies dropped because the row they name is not of the queue they came from."""
    for queue, n in Tally(queues).items():
        MISROUTED.labels(queue).inc(n)


def orphaned(queues: list[str]) -> None:
    """Count copies set aside because no row has their id (delivery/orphans.py)."""
    for queue, n in Tally(queues).items():
        ORPHANED.labels(queue).inc(n)


def orphans_dropped(queues: list[str]) -> None:
    """Count copies with no row acked without a row: their queue holds its bound (delivery/orphans.py)."""
    for queue, n in Tally(queues).items():
        ORPHANS_DROPPED.labels(queue).inc(n)


def _learn(rows) -> None:
    try:
        label_names.learn(rows)
    except DatabaseError as exc:
        log.warning("metrics: team, endpoint and version names not read (%s); ids used as labels", exc)


def observe_many(histogram, values: list[float]) -> None:
    """``histogram.observe(v)`` for each of ``values`` (a labelled child), with one increment per
    bucket and one of the sum: what the observations one by one would export (a bucket is the
    first upper bound >= the value, as Histogram.observe finds it). The sum is added once, so it
    may differ from one-by-one additions in the last bits of a float. Falls back to observe() on a
    histogram that does not look like prometheus_client's."""
    bounds, buckets, total = (getattr(histogram, name, None) for name in ("_upper_bounds", "_buckets", "_sum"))
    if bounds is None or buckets is None or total is None:
        for value in values:
            histogram.observe(value)
        return
    histogram._raise_if_not_observable()
    total.inc(sum(values))
    for index, n in Tally(bisect_left(bounds, value) for value in values).items():
        buckets[index].inc(n)


class _Labelled(NamedTuple):
    endpoint_id: int
    topology_id: int


def deliveries_on_commit(rows: list[tuple[int, int, int, int | None]]) -> None:
    """First deliveries of messages, as (endpoint_id, topology_id, lateness_ms, throttled_ms or
    None) -- what ``arrival`` counts for a DELIVER, without an object per message: the set-based
    batch's path (delivery/services.py). Counted once the current transaction commits."""
    if rows:
        transaction.on_commit(lambda: _count_deliveries(rows), robust=True)


def _count_deliveries(rows) -> None:
    groups: dict[tuple, list] = defaultdict(list)
    for endpoint_id, topology_id, lateness_ms, throttled_ms in rows:
        groups[(endpoint_id, topology_id)].append((lateness_ms, throttled_ms or 0))
    keys = [_Labelled(*key) for key in groups]
    _learn(keys)
    for key in keys:
        labels = label_names.of(key)
        values = groups[key]
        DELIVERIES.labels(*labels).inc(len(values))
        observe_many(LATENESS.labels(*labels), [max(late - waited, 0) / 1000 for late, waited in values])
        if waits := [waited / 1000 for _, waited in values if waited]:
            THROTTLED.labels(*labels).inc(len(waits))
            observe_many(THROTTLE_WAIT.labels(*labels), waits)


def record_on_commit(events: list[Counted | None]) -> None:
    """Count the events (None: nothing to count) once the current transaction commits (never, if
    it rolls back)."""
    events = [event for event in events if event is not None]
    if events:
        transaction.on_commit(lambda: record(events), robust=True)


def arrival(kind: Arrival, row, change: lifecycle.Change) -> Counted | None:
    """What a hand-over counts: the first delivery of a message (with its lateness), a duplicate
    or a cancelled one dropped, a message that expired. A retry's later attempt is not a new delivery."""
    if kind is Arrival.DELIVER:
        return (Counted(DELIVERIES, row, change["lateness_ms"], change.get("throttled_ms"))
                if "delivered_at" in change else None)
    if kind is Arrival.EXPIRED:  # expired by this arrival; a copy of a row expired before: nothing
        return Counted(EXPIRED, row) if change else None
    return Counted({Arrival.DUPLICATE: DUPLICATES, Arrival.SUPERSEDED: SUPERSEDED}.get(kind, CANCELLED_ARRIVALS), row)


def handler_failed(row, *, retried: bool) -> list[Counted]:
    return [Counted(HANDLER_FAILURES, row), *([Counted(HANDLER_RETRIES, row)] if retried else [])]


def expired(rows) -> None:
    """Messages just expired outside an arrival (the relay, the timeout manager): once committed."""
    record_on_commit([Counted(EXPIRED, row) for row in rows])


def cancelled(row) -> None:
    record_on_commit([Counted(CANCELLATIONS, row)])


def superseded_by_debounce(rows) -> None:
    record_on_commit([Counted(MESSAGES_SUPERSEDED, row) for row in rows])


def ordering_woken_on_commit(count: int) -> None:
    transaction.on_commit(lambda: ORDERING_WAKES.inc(count), robust=True)


def rescheduled(row) -> None:
    record_on_commit([Counted(RESCHEDULES, row)])


def scheduled(rows) -> None:
    """Rows just saved: count those due before they were accepted (lifecycle.scheduled_in_past)."""
    record_on_commit([Counted(SCHEDULED_IN_PAST, row) for row in rows
                      if lifecycle.scheduled_in_past(row.due_at, row.created_at)])


def relay_outcome(published, failed, broker_messages=()) -> None:
    """Broker facts, counted at once (a publish happened even if its commit does not). The relay's
    rows carry their version (it built their routes from it): no query inside its transaction.
    ``broker_messages``: the first row of each confirmed broker message (of each envelope)."""
    for metric, rows in ((RELAY_PUBLISHED, published), (RELAY_FAILURES, failed),
                         (RELAY_BROKER_MESSAGES, broker_messages)):
        for version, n in Tally(row.topology.name for row in rows).items():
            metric.labels(version).inc(n)


def fanned_out(count: int) -> None:
    """Copies an event copy's fan-out published (confirmed)."""
    if count:
        FANNED_OUT.inc(count)


def rescued(rows) -> None:
    """Rescue copies the broker confirmed: counted at once, like the relay's publishes."""
    record([Counted(RESCUED, row) for row in rows])


def quota_usage(team: str, quota: str, ratio: float) -> None:
    QUOTA_USAGE.labels(team, quota).set(ratio)


def quota_refused(team: str, quota: str) -> None:
    QUOTA_REFUSALS.labels(team, quota).inc()


def event_published(team: str, *, matched: bool) -> None:
    EVENTS.labels(team, "yes" if matched else "no").inc()


def held(count: int) -> None:
    HELD.set(count)


NOTIFICATIONS = Counter(
    "delay_notifications", "Notifications and callbacks (issue 48) by type and outcome: made (a message to the "
    "team's endpoint), dropped (refused by the team's in-flight quota), error (not made: logged).",
    ("type", "outcome"))


def notifications_counted(counts: list[tuple[str, str]]) -> None:
    """(type, outcome) per notification, once its transaction has committed (made, dropped) or at
    once (error: nothing was written)."""
    if not counts:
        return
    tally = Tally(counts)

    def count() -> None:
        for (kind, outcome), n in tally.items():
            NOTIFICATIONS.labels(str(kind), outcome).inc(n)

    if transaction.get_connection().in_atomic_block and not all(o == "error" for _, o in counts):
        transaction.on_commit(count)
    else:
        count()

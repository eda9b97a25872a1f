"""The figures /metrics reads from the database and the RabbitMQ management API: the outbox (its
depth and the age of its oldest row), the messages overdue past the report's grace (what it calls
lost), those overdue past the rescue's delay per team and endpoint (copies the rescue has not
brought: a Celery queue's workers down, a broker that takes no copy), the messages waiting for their
ordering key's turn per team and endpoint, and per version what is in flight in each level and in the
unroutable queue.

They cost queries and an HTTP call, so they are never read on a scrape's path: a scrape answers
from the last reading at once and, when that is older than DELAY_METRICS_CACHE_SECONDS, starts a
new one in a background thread (one at a time). Only a process's first scrape waits for a
reading, at most FIRST_WAIT_SECONDS.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import DatabaseError, connection
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from rabbit import BrokerError
from scheduling.config.conf import conf, setting_name
from scheduling.messages.selectors import (
    Outbox,
    message_count_overdue_by_version,
    message_count_overdue_in_flight,
    message_count_waiting,
    outbox_get,
)
from scheduling.versions.broker import VersionDepths, topology_version_list_depths
from scheduling.versions.selectors import topology_version_list_provisioned

log = logging.getLogger(__name__)
FIRST_WAIT_SECONDS = 2.0
STUCK_AFTER_MS_WITHOUT_RESCUE = 1000  # what "overdue in flight" means with DELAY_RESCUE_AFTER_MS 0


@dataclass(frozen=True)
class Figures:
    taken_at: float  # epoch seconds
    versions: list[str] = field(default_factory=list)  # provisioned: their figures show 0, not nothing
    outbox: Outbox | None = None  # None: the database could not be read
    overdue: dict[str, int] | None = None
    depths: dict[str, VersionDepths] | None = None  # None: the management API could not be read
    stuck: dict[tuple[str, str], int] = field(default_factory=dict)  # (team, endpoint) -> overdue in flight
    waiting: dict[tuple[str, str], int] = field(default_factory=dict)  # (team, endpoint) -> waiting for a key's turn


def read_figures() -> Figures:
    """One reading; a part that cannot be read is None (and its ``up`` gauge 0)."""
    now = timezone.now()
    versions, outbox, overdue, depths, stuck, waiting = [], None, None, None, {}, {}
    try:
        try:
            versions = list(topology_version_list_provisioned().order_by("name")
                            .values_list("name", flat=True))
            outbox = outbox_get()
            overdue = message_count_overdue_by_version(
                now=now, grace=timedelta(seconds=conf().accuracy_lost_after_seconds))
            stuck = message_count_overdue_in_flight(now=now, overdue_by=timedelta(
                milliseconds=conf().rescue_after_ms or STUCK_AFTER_MS_WITHOUT_RESCUE))
            waiting = message_count_waiting()
        except DatabaseError as exc:
            log.warning("metrics: the outbox and overdue figures were not read (%s)", exc)
        try:
            depths = topology_version_list_depths()
        except (BrokerError, DatabaseError) as exc:
            log.warning("metrics: the in-flight figures were not read (%s)", exc)
    finally:
        connection.close()  # this thread's own connection: it would otherwise stay open
    return Figures(now.timestamp(), versions, outbox, overdue, depths, stuck, waiting)


def families(figures: Figures, now: float) -> list[GaugeMetricFamily]:
    up = GaugeMetricFamily(
        "delay_metrics_figures_up", "Whether the last reading of a source succeeded.", labels=["source"])
    up.add_metric(["database"], float(figures.outbox is not None))
    up.add_metric(["broker"], float(figures.depths is not None))
    age = GaugeMetricFamily(
        "delay_metrics_figures_age_seconds", "How old the database and broker figures are.",
        value=max(0.0, now - figures.taken_at))
    found = [up, age]
    if figures.outbox is not None:
        pending = GaugeMetricFamily(
            "delay_outbox_pending_messages", "Rows waiting for the relay to publish them (the outbox).",
            labels=["version"])
        overdue = GaugeMetricFamily(
            "delay_overdue_messages", "Messages still pending or published longer than "
            "ACCURACY_LOST_AFTER_SECONDS after due (lost, to the accuracy report).", labels=["version"])
        for version in sorted({*figures.versions, *figures.outbox.pending, *figures.overdue}):
            pending.add_metric([version], figures.outbox.pending.get(version, 0))
            overdue.add_metric([version], figures.overdue.get(version, 0))
        stuck = GaugeMetricFamily(
            "delay_overdue_in_flight_messages", "First deliveries still pending or published longer than "
            f"{setting_name('rescue_after_ms')} after due, per active endpoint that has some.",
            labels=["team", "endpoint"])
        for (team, endpoint), messages in sorted(figures.stuck.items()):
            stuck.add_metric([team, endpoint], messages)
        waiting = GaugeMetricFamily(
            "delay_messages_waiting", "Messages waiting for their ordering key's turn (status waiting), per "
            "endpoint that has some.", labels=["team", "endpoint"])
        for (team, endpoint), messages in sorted(figures.waiting.items()):
            waiting.add_metric([team, endpoint], messages)
        oldest = figures.outbox.oldest_created_at
        found += [pending, overdue, stuck, waiting, GaugeMetricFamily(
            "delay_outbox_oldest_age_seconds", "Age of the oldest row waiting for the relay (0: none).",
            value=max(0.0, figures.taken_at - oldest.timestamp()) if oldest else 0.0)]
    if figures.depths is not None:
        in_flight = GaugeMetricFamily(
            "delay_in_flight_messages", "Messages in a cascade level's queues (every shard).",
            labels=["version", "level"])
        unroutable = GaugeMetricFamily(
            "delay_unroutable_messages", "Messages in a version's unroutable queue (no binding for their "
            "endpoint).", labels=["version"])
        for version, depths in sorted(figures.depths.items()):
            for level, messages in sorted(depths.levels.items()):
                in_flight.add_metric([version, f"{level:02d}"], messages)
            if depths.unroutable is not None:
                unroutable.add_metric([version], depths.unroutable)
        found += [in_flight, unroutable]
    return found


class CachedFigures(Collector):
    """A Prometheus collector of the figures, read in the background at most every ``max_age``
    seconds (``clock``: monotonic seconds; ``read``: a reading; both replaceable in tests)."""

    def __init__(self, max_age: float, read: Callable[[], Figures] = read_figures,
                 clock: Callable[[], float] = time.monotonic, first_wait: float = FIRST_WAIT_SECONDS):
        self.max_age, self.read, self.clock, self.first_wait = max_age, read, clock, first_wait
        self.figures: Figures | None = None
        self._started_at = float("-inf")  # of the last reading: at most one per max_age, failed or not
        self._reading: threading.Thread | None = None
        self._lock = threading.Lock()

    def collect(self):
        self.refresh()
        figures = self.figures
        return families(figures, time.time()) if figures is not None else []

    def refresh(self) -> None:
        """Start a reading when the last one is older than max_age; wait only for a first one."""
        with self._lock:
            busy = self._reading is not None and self._reading.is_alive()
            if not busy and self.clock() - self._started_at >= self.max_age:
                self._started_at = self.clock()
                self._reading = threading.Thread(target=self._read, name="dp-metrics-figures", daemon=True)
                self._reading.start()
            reading = self._reading
        if self.figures is None and reading is not None:
            reading.join(self.first_wait)

    def _read(self) -> None:
        try:
            self.figures = self.read()
        except Exception:  # a bug must not kill scrapes: say so and keep the last figures
            log.exception("metrics: reading the figures failed")


_cached: CachedFigures | None = None


def cached_figures() -> CachedFigures:
    """The process's one collector (its cache is shared by every scrape the process answers)."""
    global _cached
    if _cached is None or _cached.max_age != conf().metrics_cache_seconds:
        _cached = CachedFigures(conf().metrics_cache_seconds)
    return _cached

"""The figures from the database and the management API: read at most once per cache period, in
the background (a scrape never waits for a slow reading, but the first), and right."""

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.messages.selectors import Outbox
from scheduling.models import DeliveryMode, Endpoint, ScheduledMessage
from scheduling.probes.metrics_figures import CachedFigures, Figures, families, read_figures
from scheduling.versions.broker import VersionDepths

Status = ScheduledMessage.Status


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Reads:
    """A reading that counts its calls; ``gate`` makes it wait until set."""

    def __init__(self, gate: threading.Event | None = None):
        self.calls, self.gate = 0, gate

    def __call__(self) -> Figures:
        self.calls += 1
        if self.gate is not None:
            self.gate.wait(5)
        return Figures(taken_at=time.time(), versions=["v3"], outbox=Outbox({"v3": self.calls}, None), overdue={})


def samples(collector) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in collector.collect() for s in family.samples}


def pending(collector) -> float:
    return samples(collector)[("delay_outbox_pending_messages", (("version", "v3"),))]


def wait_for(reads, calls):
    deadline = time.monotonic() + 5
    while reads.calls < calls and time.monotonic() < deadline:
        time.sleep(0.01)


def test_figures_are_read_at_most_once_per_cache_period():
    clock, reads = Clock(), Reads()
    collector = CachedFigures(15, read=reads, clock=clock)
    assert pending(collector) == 1  # the first scrape waits for the first reading
    clock.now += 14.9
    assert pending(collector) == 1 and pending(collector) == 1
    assert reads.calls == 1
    clock.now += 0.1  # 15 s after the first reading started: a new one, in the background
    collector.collect()
    wait_for(reads, 2)
    assert reads.calls == 2
    deadline = time.monotonic() + 5
    while pending(collector) != 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pending(collector) == 2


def test_a_slow_reading_never_holds_a_scrape_that_has_figures():
    clock, gate = Clock(), threading.Event()
    reads = Reads(gate)
    gate.set()
    collector = CachedFigures(15, read=reads, clock=clock)
    assert pending(collector) == 1
    gate.clear()  # the next reading hangs (a management API that does not answer)
    clock.now += 60
    started = time.monotonic()
    assert pending(collector) == 1  # the last figures, at once
    assert pending(collector) == 1
    assert time.monotonic() - started < 0.5
    wait_for(reads, 2)
    assert reads.calls == 2, "one reading at a time, however many scrapes come"
    gate.set()


def test_a_first_scrape_waits_for_a_reading_only_so_long():
    gate = threading.Event()
    collector = CachedFigures(15, read=Reads(gate), clock=Clock(), first_wait=0.2)
    started = time.monotonic()
    assert list(collector.collect()) == []
    assert time.monotonic() - started < 1
    gate.set()


def test_a_failing_reading_keeps_the_last_figures():
    clock, reads = Clock(), Reads()
    collector = CachedFigures(15, read=reads, clock=clock)
    assert pending(collector) == 1

    def broken():
        raise RuntimeError("bug")

    collector.read = broken
    clock.now += 15
    collector.collect()
    time.sleep(0.1)
    assert pending(collector) == 1


def test_families_say_what_could_not_be_read_and_show_zero_for_known_versions():
    figures = Figures(taken_at=100.0, versions=["v2", "v3"], outbox=Outbox({"v3": 4}, None), overdue={"v2": 1})
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for family in families(figures, now=103.0) for s in family.samples}
    assert found[("delay_outbox_pending_messages", (("version", "v2"),))] == 0
    assert found[("delay_outbox_pending_messages", (("version", "v3"),))] == 4
    assert found[("delay_overdue_messages", (("version", "v2"),))] == 1
    assert found[("delay_overdue_messages", (("version", "v3"),))] == 0
    assert found[("delay_outbox_oldest_age_seconds", ())] == 0
    assert found[("delay_metrics_figures_up", (("source", "database"),))] == 1
    assert found[("delay_metrics_figures_up", (("source", "broker"),))] == 0  # depths None: not read
    assert found[("delay_metrics_figures_age_seconds", ())] == 3
    assert not any(name == "delay_in_flight_messages" for name, _ in found)
    with_broker = Figures(100.0, ["v3"], None, None, {"v3": VersionDepths({0: 2, 13: 5}, 1)})
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for family in families(with_broker, now=100.0) for s in family.samples}
    assert found[("delay_in_flight_messages", (("level", "13"), ("version", "v3")))] == 5
    assert found[("delay_in_flight_messages", (("level", "00"), ("version", "v3")))] == 2
    assert found[("delay_unroutable_messages", (("version", "v3"),))] == 1
    assert found[("delay_metrics_figures_up", (("source", "database"),))] == 0


@pytest.mark.django_db
def test_read_figures_counts_the_outbox_its_oldest_row_and_the_overdue(platform, endpoint_name, settings):
    settings.ACCURACY_LOST_AFTER_SECONDS = 600
    v2 = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=platform["v2"])
    waiting = Endpoint.objects.create(name=endpoint_name + "-tm", queue=endpoint_name + "-tm", topology=platform["v3"],
                                      delivery_mode=DeliveryMode.TIMEOUT_MANAGER)
    now = timezone.now()

    def row(endpoint, status, *, created_ago, due_in, mode=DeliveryMode.NATIVE):
        ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, payload={}, status=status,
                                        due_at=now + due_in, requested_delay_ms=0, delivery_mode=mode,
                                        created_at=now - created_ago)

    row(v2, Status.PENDING, created_ago=timedelta(seconds=90), due_in=timedelta(hours=1))
    row(v2, Status.PENDING, created_ago=timedelta(seconds=5), due_in=timedelta(hours=1))
    row(v2, Status.PUBLISHED, created_ago=timedelta(hours=2), due_in=-timedelta(minutes=11))  # lost
    row(v2, Status.PUBLISHED, created_ago=timedelta(hours=2), due_in=-timedelta(minutes=9))  # late, within grace
    row(v2, Status.DELIVERED, created_ago=timedelta(hours=2), due_in=-timedelta(hours=1))
    # a timeout-manager row waits in the table by design: not the relay's backlog, but lost if overdue
    row(waiting, Status.PENDING, created_ago=timedelta(hours=3), due_in=-timedelta(minutes=20),
        mode=DeliveryMode.TIMEOUT_MANAGER)
    figures = read_figures()
    assert figures.versions == ["v1", "v2", "v3"]
    assert figures.outbox.pending == {"v2": 2}
    assert 89 <= figures.taken_at - figures.outbox.oldest_created_at.timestamp() < 100
    assert figures.overdue == {"v2": 1, "v3": 1}
    # the broker's part: every provisioned version, each level present, nothing in flight in this vhost
    assert set(figures.depths) == {"v1", "v2", "v3"}
    assert figures.depths["v3"].unroutable in (0, None)  # None: the broker has no statistics yet


def test_messages_overdue_in_flight_are_a_gauge_per_team_and_endpoint_that_has_some():
    figures = Figures(100.0, ["v3"], Outbox({}, None), {}, None, stuck={("default", "billing"): 3, ("acme", "billing"): 1})
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for family in families(figures, now=100.0) for s in family.samples}
    assert found[("delay_overdue_in_flight_messages", (("endpoint", "billing"), ("team", "default")))] == 3
    assert found[("delay_overdue_in_flight_messages", (("endpoint", "billing"), ("team", "acme")))] == 1
    assert len([name for name, _ in found if name == "delay_overdue_in_flight_messages"]) == 2


@pytest.mark.django_db
def test_read_figures_counts_first_deliveries_overdue_past_the_rescue_s_delay(platform, endpoint_name, settings):
    settings.DELAY_RESCUE_AFTER_MS = 2000
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=platform["v3"])
    paused = Endpoint.objects.create(name=endpoint_name + "-p", queue=endpoint_name + "-p", topology=platform["v3"],
                                     is_active=False)
    now = timezone.now()

    def row(on, status, overdue_s, **fields):
        ScheduledMessage.objects.create(endpoint=on, topology=on.topology, payload={}, status=status,
                                        due_at=now - timedelta(seconds=overdue_s), requested_delay_ms=0, **fields)

    row(endpoint, Status.PUBLISHED, 3)  # its copy lost: counted
    row(endpoint, Status.PENDING, 60)  # never published: counted
    row(endpoint, Status.PUBLISHED, 1)  # within the rescue's delay
    row(endpoint, Status.PUBLISHED, 30, attempts=2)  # a handler retry waits for its backoff
    row(endpoint, Status.DELIVERED, 30)
    row(paused, Status.PUBLISHED, 30)  # a paused endpoint's messages wait on purpose
    tasks = Endpoint.objects.create(name=endpoint_name + "-t", queue=endpoint_name + "-t", topology=platform["v3"],
                                    handler=Endpoint.Handler.CELERY_QUEUE)
    row(tasks, Status.PUBLISHED, 2.5)  # a task leaves the cascade up to a unit (1 s) late: not yet
    row(tasks, Status.PUBLISHED, 3.5)
    assert read_figures().stuck == {("default", endpoint_name): 2, ("default", endpoint_name + "-t"): 1}


def test_messages_waiting_are_a_gauge_per_team_and_endpoint_that_has_some():
    figures = Figures(100.0, ["v3"], Outbox({}, None), {}, None, waiting={("default", "billing"): 4,
                                                                        ("acme", "orders"): 1})
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for family in families(figures, now=100.0) for s in family.samples}
    assert found[("delay_messages_waiting", (("endpoint", "billing"), ("team", "default")))] == 4
    assert found[("delay_messages_waiting", (("endpoint", "orders"), ("team", "acme")))] == 1
    assert len([name for name, _ in found if name == "delay_messages_waiting"]) == 2


@pytest.mark.django_db
def test_read_figures_counts_the_messages_waiting_for_their_keys_turn(platform, endpoint_name):
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=platform["v3"])
    now = timezone.now()
    for status in (Status.WAITING, Status.WAITING, Status.PUBLISHED, Status.DELIVERED):
        ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, payload={}, status=status,
                                        due_at=now, requested_delay_ms=0, ordering_key="k")
    assert read_figures().waiting == {("default", endpoint_name): 2}

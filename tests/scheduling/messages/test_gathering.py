"""The rows of concurrent requests gathered into one relay batch (messages/gathering.py, rabbit/gather.py),
against the real broker and database: threads schedule as the API's threads do, each committing
its own transaction. Fewer, fuller envelopes than requests; every message in the broker once; a
broker failure in a gathered batch leaves its rows pending for the sweeper, published once; one
connection and one channel for all of it."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from prometheus_client import REGISTRY

from harness.waiting import wait_until
from rabbit import BrokerUnavailable, Outcome
from rabbit.broker import Broker
from scheduling.config.conf import broker
from scheduling.messages import wire
from scheduling.messages.gathering import GATHERER, relay_gather_stats
from scheduling.messages.relay import relay_publish
from scheduling.messages.services import message_schedule_many
from scheduling.models import ScheduledMessage
from tests.topology.helpers import get

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.broker]
Status = ScheduledMessage.Status


@pytest.fixture
def v3(bound_endpoint, settings, monkeypatch):
    settings.DELAY_ENVELOPES = True
    return bound_endpoint("v3")


@pytest.fixture
def busy_publisher(monkeypatch):
    """The process's publisher thread's next publish takes ``seconds`` longer (a slow confirm), so
    that requests made meanwhile wait for the next batch, as they do under load. Returns an event
    set once that publish is under way."""
    original = Broker.publish
    held = {"seconds": 0.0, "entered": threading.Event()}

    def publish(self, messages, **kwargs):
        if threading.current_thread().name == GATHERER.thread_name and held["seconds"]:
            seconds, held["seconds"] = held["seconds"], 0.0
            held["entered"].set()
            time.sleep(seconds)
        return original(self, messages, **kwargs)

    monkeypatch.setattr(Broker, "publish", publish)

    def hold(seconds: float) -> threading.Event:
        held["seconds"], held["entered"] = seconds, threading.Event()
        return held["entered"]

    return hold


def in_one_second() -> None:
    """Start near the beginning of a second: a burst inside it shares envelope keys (due second)."""
    while not 0.02 < (timezone.now().microsecond / 1e6) < 0.3:
        time.sleep(0.01)


def schedule_concurrently(endpoint, delays: list[float]) -> list[ScheduledMessage]:
    """One request per delay, each in a thread of its own (its own connection and transaction), all
    released at once; the messages as each request returned them."""
    barrier, results, errors = threading.Barrier(len(delays)), [None] * len(delays), []

    def one(index):
        try:
            barrier.wait(10)
            (result,) = message_schedule_many(items=[{"endpoint": endpoint.name, "payload": {"n": index},
                                                      "delay": delays[index]}])
            results[index] = result.message
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(delays))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return results


def while_busy(busy_publisher, endpoint, delays: list[float], *, lone_delay: float = 0, hold: float = 1.0):
    """A lone request finds the publisher idle and goes at once, slowly (``hold`` seconds); the
    requests of ``delays`` are made meanwhile, all at once. Returns (the lone message, theirs)."""
    entered = busy_publisher(hold)
    lone = []
    thread = threading.Thread(target=lambda: lone.extend(schedule_concurrently(endpoint, [lone_delay])))
    thread.start()
    assert entered.wait(10)
    messages = schedule_concurrently(endpoint, delays)
    thread.join(30)
    return lone[0], messages


def counted() -> tuple[float, float]:
    return tuple(REGISTRY.get_sample_value(f"delay_relay_{name}_total", {"version": "v3"}) or 0
                 for name in ("published", "broker_messages"))


def drain(queue: str, expected: int, timeout: float = 10) -> list:
    """The queue's broker messages until they carry ``expected`` ids (envelopes unpacked) or
    ``timeout``, and any that come shortly after (a duplicate would)."""
    got = []
    deadline = time.monotonic() + timeout

    def ids():
        return sum(len(wire.carried_ids(m.headers, m.body)) for m in got)

    with broker().session() as session:
        while ids() < expected and time.monotonic() < deadline:
            message = get(session, queue)
            if message is None:
                time.sleep(0.05)
            else:
                got.append(message)
        time.sleep(0.3)
        while (message := get(session, queue)) is not None:
            got.append(message)
    return got


def carried(messages) -> list[str]:
    return sorted(i for m in messages for i in wire.carried_ids(m.headers, m.body))


def test_concurrent_requests_share_envelopes_and_each_message_is_in_the_broker_once(v3, busy_publisher):
    """23 single-message requests due in the same second to one endpoint, made while the publisher
    is busy with another: they leave together, in one envelope, which every row's recorded route
    and each request's answer agree with."""
    before, batches = counted(), relay_gather_stats()[0]
    in_one_second()
    lone, messages = while_busy(busy_publisher, v3, [0] * 23)
    assert {m.status for m in messages} == {Status.PUBLISHED}  # what each request answered
    published, broker_messages = (after - b for after, b in zip(counted(), before))
    assert published == 24 and broker_messages == 2, (published, broker_messages)
    assert relay_gather_stats()[0] - batches == 2
    got = drain(v3.queue, 24)
    assert carried(got) == sorted(str(m.id) for m in [lone, *messages])  # each once: none lost, none twice
    assert len(got) == 2
    rows = list(ScheduledMessage.objects.filter(id__in=[m.id for m in messages]))
    assert {r.status for r in rows} == {Status.PUBLISHED}
    assert {(r.first_exchange, r.routing_key) for r in rows} == {(m.first_exchange, m.routing_key) for m in messages}
    assert len({(r.first_exchange, r.routing_key) for r in rows}) == 1


def test_an_envelope_of_several_requests_has_the_route_each_recorded_and_the_latest_publish_time(v3, busy_publisher):
    """Built at the claim time of the request holding the earliest message, so its route is the one
    every row recorded; its x-dp-published-at-ms is the latest row's (the unroutable drain leaves
    alone a row published after a copy's time)."""
    in_one_second()
    lone, messages = while_busy(busy_publisher, v3, [1.6] * 8, lone_delay=1.6)
    got = drain(v3.queue, 9, timeout=10)  # one unit of delay: level 0, then the endpoint's queue
    assert carried(got) == sorted(str(m.id) for m in [lone, *messages]) and len(got) == 2
    (envelope,) = [m for m in got if len(wire.carried_ids(m.headers, m.body)) == 8]
    rows = list(ScheduledMessage.objects.filter(id__in=[m.id for m in messages]))
    ((exchange, _),) = {(r.first_exchange, r.routing_key) for r in rows}  # one route, the envelope's
    assert exchange == "dp.v3.delay-level-00" and envelope.headers[wire.H_DELAY_MS] == 1000
    assert envelope.headers[wire.H_PUBLISHED_AT_MS] == max(wire.to_epoch_ms(r.published_at) for r in rows)
    assert envelope.headers[wire.H_DUE_AT_MS] == min(r.due_at_ms for r in rows)


def test_a_broker_failure_mid_gathered_batch_leaves_its_rows_pending_and_the_sweeper_publishes_them_once(
        v3, busy_publisher, monkeypatch):
    """A gathered batch of two envelopes (two due seconds), each carrying rows of five requests: the
    broker confirms the first, the connection breaks before the second is confirmed, and no broker
    can be reached for the retry. The second envelope's rows go back to pending (and their requests
    answer so); the first's stay published; the sweeper publishes the rest, once."""
    original = Broker.publish  # busy_publisher's
    failing = {"step": "first"}

    def publish(self, messages, **kwargs):
        if threading.current_thread().name != GATHERER.thread_name or not failing["step"]:
            return original(self, messages, **kwargs)
        if failing["step"] == "retry":
            failing["step"] = None
            raise BrokerUnavailable("cannot connect to RabbitMQ at amqp://nowhere")
        if len(messages) < 2:  # the lone request's
            return original(self, messages, **kwargs)
        failing["step"] = "retry"
        now_ones = [i for i, out in enumerate(messages) if out.headers[wire.H_DELAY_MS] == 0]
        sent = original(self, [messages[i] for i in now_ones], **kwargs)
        confirmed = {now_ones[j] for j in sent.confirmed}
        return Outcome(confirmed=confirmed, error="Connection reset by peer",
                       failed={i: "not confirmed: Connection reset by peer"
                               for i in range(len(messages)) if i not in confirmed})

    monkeypatch.setattr(Broker, "publish", publish)
    in_one_second()
    delays = [0, 1.6] * 5
    lone, messages = while_busy(busy_publisher, v3, delays)
    assert failing["step"] is None  # the gathered batch met the failure and its retry
    sent = [m for m, d in zip(messages, delays) if d == 0]
    unsent = [m for m, d in zip(messages, delays) if d == 1.6]
    assert {m.status for m in [lone, *sent]} == {Status.PUBLISHED}
    assert {m.status for m in unsent} == {Status.PENDING}  # what those requests answered
    rows = {r.id: r for r in ScheduledMessage.objects.filter(id__in=[m.id for m in messages])}
    assert {rows[m.id].status for m in sent} == {Status.PUBLISHED}
    assert {rows[m.id].status for m in unsent} == {Status.PENDING}
    assert all("Connection reset by peer" in rows[m.id].last_error for m in unsent)
    assert relay_publish(older_than=timedelta(0)).published == 5  # the sweeper
    assert relay_publish(older_than=timedelta(0)).published == 0
    got = drain(v3.queue, 11, timeout=10)
    assert carried(got) == sorted(str(m.id) for m in [lone, *messages])  # each once


def test_without_the_rescue_pending_rows_of_concurrent_requests_are_gathered_too(v3, busy_publisher, settings):
    """DELAY_RESCUE_AFTER_MS=0: each request locks its pending rows, the publisher publishes them with
    the others', each request marks its own in its own transaction."""
    settings.DELAY_RESCUE_AFTER_MS = 0
    before = counted()
    in_one_second()
    lone, messages = while_busy(busy_publisher, v3, [0] * 12)
    published, broker_messages = (after - b for after, b in zip(counted(), before))
    assert published == 13 and broker_messages == 2, (published, broker_messages)
    rows = list(ScheduledMessage.objects.filter(id__in=[m.id for m in [lone, *messages]]))
    assert {r.status for r in rows} == {Status.PUBLISHED} and all(r.routing_key for r in rows)
    assert len({r.published_at for r in rows if r.id != lone.id}) == 1  # the batch's time
    got = drain(v3.queue, 13)
    assert carried(got) == sorted(str(m.id) for m in [lone, *messages])


def test_one_connection_and_one_channel_for_every_request_of_the_process(v3):
    """The publisher thread keeps its connection and confirm channel: 30 requests one after another
    open none (a channel per publish cost two more round trips each)."""
    message_schedule_many(items=[{"endpoint": v3.name, "payload": {}, "delay": 0}])  # opened, if not yet
    stats = broker().stats
    before = (stats.connections, stats.channels, stats.batches)
    for n in range(30):
        message_schedule_many(items=[{"endpoint": v3.name, "payload": {"n": n}, "delay": 30}])
    assert (stats.connections, stats.channels) == before[:2]
    assert stats.batches - before[2] == 30  # one at a time: nothing to wait for, each went at once
    conn = broker().publisher_connections()[GATHERER.thread_name]
    port = conn.connection.sock.getsockname()[1]

    def seen():  # the management API's figures lag by its stats interval
        return [c for c in broker().management._request("GET", "/connections") or []
                if c.get("peer_port") == port and c.get("channels") == 1]

    wait_until(seen, 20, 0.5, "the publisher's connection, with its one channel, in the management API")

"""The webhook engine against real local receivers: one deadline over the whole call, the answer
read up to a cap, the SSRF guard at connect time, and a receiver that never finishes holding only
its own endpoint's slots."""

import ipaddress
import queue
import time

import pytest

from harness.recording_server import RecordingServer
from harness.tarpit_server import TarpitServer
from scheduling.delivery.webhooks import Call, EngineSettings, WebhookEngine
from scheduling.models import AttemptOutcome

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


@pytest.fixture
def engine():
    results: queue.SimpleQueue = queue.SimpleQueue()
    engine = WebhookEngine(EngineSettings(concurrency=64, response_max_bytes=1000, excerpt_bytes=50), results.put)
    engine.start()
    engine.results = results
    yield engine
    engine.stop()


def call(url, n=0, endpoint="e", team="t", deadline=2.0, limit=8, networks=LOOPBACK):
    return Call(f"m{n}", endpoint, team, url, b'{"n":%d}' % n, {"Content-Type": "application/json"}, deadline,
                networks, limit)


def take(engine, count, timeout=15):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        got.append(engine.results.get(timeout=max(0.01, deadline - time.monotonic())))
    return got


def test_a_call_posts_the_body_and_keeps_the_answer_as_an_excerpt(engine):
    with RecordingServer(body=b"thanks" * 20) as server:
        engine.submit([call(server.url, n) for n in range(5)])
        results = take(engine, 5)
        engine.submit([call(server.url, n) for n in range(5, 10)])
        results += take(engine, 5)
    assert {r.outcome for r in results} == {AttemptOutcome.OK} and {r.status_code for r in results} == {200}
    assert results[0].excerpt == ("thanks" * 20)[:50]
    assert sorted(server.bodies(), key=lambda b: b["n"]) == [{"n": n} for n in range(10)]
    assert server.connections() <= 5  # the second five went on the first five's connections


def test_a_trickling_receiver_is_cut_at_the_deadline(engine):
    with TarpitServer(every=0.2) as tarpit:
        started = time.monotonic()
        engine.submit([call(tarpit.url, deadline=1.0)])
        (result,) = take(engine, 1)
    assert result.outcome == AttemptOutcome.TIMEOUT
    assert 0.9 <= time.monotonic() - started < 5 and 900 <= result.duration_ms < 5000


def test_an_answer_over_the_cap_fails_as_too_large(engine):
    with RecordingServer(body=b"x" * 5000) as server:
        engine.submit([call(server.url)])
        (result,) = take(engine, 1)
    assert result.outcome == AttemptOutcome.TOO_LARGE and result.status_code == 200


def test_a_status_outside_2xx_fails_and_a_retry_after_is_kept(engine):
    with RecordingServer(answer=(429, {"Retry-After": "3"})) as server:
        engine.submit([call(server.url)])
        (result,) = take(engine, 1)
    assert result.outcome == AttemptOutcome.HTTP_STATUS and result.status_code == 429 and result.retry_after == "3"


def test_the_guard_refuses_loopback_unless_allowed(engine):
    with RecordingServer() as server:
        engine.submit([call(server.url, networks=())])
        (result,) = take(engine, 1)
    assert result.outcome == AttemptOutcome.GUARD and server.requests == []


def test_a_refused_connection_is_classified(engine):
    with RecordingServer() as server:
        url = server.url
    engine.submit([call(url)])
    (result,) = take(engine, 1)
    assert result.outcome == AttemptOutcome.REFUSED


def test_a_tarpit_holds_its_own_slots_and_no_one_elses(engine):
    """64 calls to a receiver that never finishes, its bulkhead 8: the healthy endpoint's 100 calls
    all end while the tarpit still holds its slots."""
    with TarpitServer(every=0.5) as tarpit, RecordingServer() as healthy:
        engine.submit([call(tarpit.url, n, endpoint="tarpit", team="A", deadline=30, limit=8) for n in range(64)])
        time.sleep(0.3)
        started = time.monotonic()
        engine.submit([call(healthy.url, n, endpoint="healthy", team="B", limit=8) for n in range(100)])
        results = take(engine, 100, timeout=10)
        took = time.monotonic() - started
        assert tarpit.requests == 8  # its bulkhead: the other 56 wait for its slots
    assert {r.call.endpoint for r in results} == {"healthy"} and {r.outcome for r in results} == {AttemptOutcome.OK}
    assert took < 5  # generous: they take milliseconds


def test_pausing_hands_back_waiting_calls_unattempted(engine):
    with TarpitServer(every=0.5) as tarpit:
        engine.submit([call(tarpit.url, n, deadline=30, limit=1) for n in range(3)])
        time.sleep(0.3)
        engine.pause("e", 60)
        results = take(engine, 2, timeout=5)
    assert [r.called for r in results] == [False, False] and tarpit.requests == 1


def test_stopping_lets_the_calls_under_way_finish_and_hands_back_the_waiting_ones(engine):
    """A worker's warm shutdown (replacing it in an upgrade) stops the engine: a call the receiver
    already has is answered and its result handed on (recorded, so the message is not called a
    second time by the next worker); a call not started comes back unattempted."""
    with RecordingServer(hold_seconds=1.0) as server:
        engine.settings.concurrency = 1
        engine.submit([call(server.url, 0), call(server.url, 1)])
        wait = time.monotonic() + 10
        while not server.requests and time.monotonic() < wait:
            time.sleep(0.01)
        engine.stop(timeout=5)
        results = {r.call.message_id: r for r in take(engine, 2, timeout=1)}
    assert results["m0"].called and results["m0"].outcome == AttemptOutcome.OK and results["m0"].status_code == 200
    assert not results["m1"].called
    assert [body["n"] for body in server.bodies()] == [0]

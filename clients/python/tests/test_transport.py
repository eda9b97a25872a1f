"""The HTTP layer, pure (httpx's MockTransport): retries only where a repeat is harmless, the same
idempotency key on every try, Retry-After honoured, answers mapped to typed errors, links to
another origin refused."""

import json

import httpx
import pytest

from delayclient import (
    BadRequest,
    Client,
    Conflict,
    DelayError,
    RateLimited,
    Retry,
    ServerError,
    TransportError,
    _transport,
)
from delayclient._version import __version__

URL = "https://delays.example.com"


def make(handler, **options):
    seen = []

    def record(request):
        seen.append(request)
        return handler(request, len(seen))

    client = Client(URL, "dpk_test", http=httpx.Client(transport=httpx.MockTransport(record)), **options)
    return client, seen


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    slept = []
    monkeypatch.setattr(_transport.time, "sleep", slept.append)
    return slept


MESSAGE = {"id": "0190", "status": "pending", "endpoint": "e", "due_at": "2026-01-01T00:00:00Z"}


def test_a_5xx_is_retried_with_the_same_idempotency_key(no_sleep):
    client, seen = make(lambda request, n: httpx.Response(503) if n < 3 else httpx.Response(201, json=MESSAGE))
    message = client.messages.schedule("e", {"a": 1}, delay=5)
    assert message.created is True and len(seen) == 3 and len(no_sleep) == 2
    keys = {json.loads(r.content)["idempotency_key"] for r in seen}
    assert len(keys) == 1 and keys != {None}


def test_retries_stop_at_the_policy(no_sleep):
    client, seen = make(lambda request, n: httpx.Response(502), retry=Retry(attempts=2))
    with pytest.raises(ServerError):
        client.messages.get("x")
    assert len(seen) == 2


def test_a_call_that_is_not_idempotent_is_sent_once():
    client, seen = make(lambda request, n: httpx.Response(503))
    with pytest.raises(ServerError):
        client.messages.republish("x")
    with pytest.raises(ServerError):
        client.messages.reschedule("x", delay=5)  # a delay counts from the server's now: not repeated
    assert len(seen) == 2


def test_429_waits_its_retry_after(no_sleep):
    client, seen = make(lambda request, n: httpx.Response(429, headers={"Retry-After": "7"},
                                                          json={"detail": "slow down"}) if n == 1
                        else httpx.Response(200, json=MESSAGE))
    assert client.messages.get("x").id == "0190"
    assert no_sleep == [7.0]


def test_429_surfaces_its_retry_after_when_retries_run_out():
    client, _ = make(lambda request, n: httpx.Response(429, headers={"Retry-After": "3"}, json={"detail": "rate"}),
                     retry=Retry(attempts=1))
    with pytest.raises(RateLimited) as limited:
        client.messages.get("x")
    assert limited.value.retry_after == 3.0 and limited.value.detail == "rate"


def test_a_connection_failure_is_retried_then_raised(no_sleep):
    def refuse(request, n):
        raise httpx.ConnectError("refused")

    client, seen = make(refuse)
    with pytest.raises(TransportError):
        client.messages.get("x")
    assert len(seen) == 4


def test_a_claim_retried_says_redelivered():
    answer = {"id": "m", "status": "delivered", "run": True}
    client, seen = make(lambda request, n: httpx.Response(502) if n == 1 else httpx.Response(200, json=answer))
    assert client.messages.claim("m", worker="w1").run is True
    assert [json.loads(r.content)["redelivered"] for r in seen] == [False, True]


def test_errors_name_the_field():
    client, _ = make(lambda request, n: httpx.Response(400, json={"delay_seconds": ["must be 0 or more"]},
                                                       headers={"X-Request-ID": "req-1"}))
    with pytest.raises(BadRequest) as bad:
        client.messages.schedule("e", {}, delay=-1)
    assert bad.value.fields == {"delay_seconds": ["must be 0 or more"]}
    assert str(bad.value) == "400: delay_seconds: must be 0 or more" and bad.value.request_id == "req-1"


def test_conflict_and_the_hierarchy():
    client, _ = make(lambda request, n: httpx.Response(409, json={"detail": "already delivered"}))
    with pytest.raises(Conflict) as conflict:
        client.messages.cancel("x")
    assert isinstance(conflict.value, DelayError) and conflict.value.detail == "already delivered"


def test_headers_and_paths():
    client, seen = make(lambda request, n: httpx.Response(200, json={"id": "a/b", "status": "cancelled"}))
    client.messages.cancel("a/b")
    (request,) = seen
    assert request.headers["authorization"] == "Bearer dpk_test"
    assert request.headers["user-agent"].startswith(f"delayplatform-client/{__version__} ")
    assert request.url.raw_path == b"/api/messages/a%2Fb/cancel/"


def test_pages_follow_next_but_never_to_another_origin():
    pages = {1: {"next": f"{URL}/api/messages/?cursor=2", "results": [MESSAGE]},
             2: {"next": "https://elsewhere.example/api/messages/?cursor=3", "results": [MESSAGE]}}
    client, seen = make(lambda request, n: httpx.Response(200, json=pages[n]))
    listed = iter(client.messages.list(status="pending"))
    assert next(listed).id == "0190" and next(listed).id == "0190"
    with pytest.raises(DelayError, match="another origin"):
        next(listed)
    assert seen[0].url.params["status"] == "pending" and seen[1].url.params["cursor"] == "2"


def test_arguments_checked_before_sending():
    client, seen = make(lambda request, n: httpx.Response(500))
    with pytest.raises(ValueError):
        client.messages.schedule("e", {}, delay=1, deliver_at="2030-01-01T00:00:00Z")
    with pytest.raises(TypeError):
        client.messages.schedule("e", {}, delay="soon")
    with pytest.raises(ValueError):
        Client("delays.example.com", "k")
    assert seen == []


def test_retry_after_as_a_date():
    assert _transport.retry_after_seconds("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert _transport.retry_after_seconds("x" * 100) is None


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_traceparent_goes_with_a_scheduling_call_and_no_other():
    client, seen = make(lambda request, n: httpx.Response(201, json=MESSAGE))
    client.messages.schedule("e", {}, delay=5, traceparent=TRACEPARENT)
    client.messages.schedule("e", {}, delay=5)
    assert seen[0].headers["traceparent"] == TRACEPARENT
    assert "traceparent" not in seen[1].headers  # no span current (or no opentelemetry): none sent
    bulk, seen = make(lambda request, n: httpx.Response(201, json={"messages": [MESSAGE]}))
    bulk.messages.schedule_many([{"endpoint": "e", "payload": {}, "delay": 5}], traceparent=TRACEPARENT)
    assert seen[0].headers["traceparent"] == TRACEPARENT


def test_the_current_opentelemetry_span_is_sent_when_there_is_one():
    trace = pytest.importorskip("opentelemetry.trace")
    span = trace.NonRecordingSpan(trace.SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7,
                                                    is_remote=False, trace_flags=trace.TraceFlags(1)))
    client, seen = make(lambda request, n: httpx.Response(201, json=MESSAGE))
    with trace.use_span(span):
        client.messages.schedule("e", {}, delay=5)
    assert seen[0].headers["traceparent"] == TRACEPARENT


def test_a_claim_says_ordered_and_ended_reports_the_end():
    answers = {"/claim/": {"id": "m", "status": "waiting", "run": False, "ordered": False},
               "/ended/": {"id": "m", "turn": "kept"}}
    client, seen = make(lambda request, n: httpx.Response(
        200, json=next(v for k, v in answers.items() if request.url.path.endswith(k))))
    claim = client.messages.claim("m")
    assert (claim.run, claim.status, claim.ordered) == (False, "waiting", False)
    assert client.messages.ended("m", retrying=True).turn == "kept"
    assert seen[-1].url.path == "/api/messages/m/ended/" and json.loads(seen[-1].content) == {"retrying": True}

"""Messages through the client against the real platform: scheduled, found, listed page after
page, rescheduled, cancelled, in bulk and by filter; the API's errors as the client's exceptions."""

import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from delayclient import BadRequest, Client, Conflict, NotFound, Unauthorized
from delayclient.models import Message


def test_schedule_get_and_cancel(client, endpoint):
    message = client.messages.schedule(endpoint.name, {"invoice": 42}, delay=3600)
    assert isinstance(message, Message) and message.created is True
    assert message.status in ("pending", "published") and message.endpoint == endpoint.name
    assert message.payload == {"invoice": 42} and message.requested_delay_ms == 3_600_000
    assert message.idempotency_key  # made by the client
    assert client.messages.get(message.id).id == message.id
    assert client.messages.cancel(message.id).status == "cancelled"
    assert client.messages.get(message.id).status == "cancelled"


def test_a_flow_key_is_sent_and_read_back(client, endpoint):
    message = client.messages.schedule(endpoint.name, {}, delay=3600, flow_key="customer-42")
    assert message.flow_key == "customer-42" and client.messages.get(message.id).flow_key == "customer-42"
    (bulk,) = client.messages.schedule_many([{"endpoint": endpoint.name, "payload": {}, "delay": 3600,
                                              "flow_key": "k"}])
    assert client.messages.get(bulk.id).flow_key == "k"
    assert client.messages.schedule(endpoint.name, {}, delay=3600).flow_key is None


def test_the_same_idempotency_key_schedules_once(client, endpoint, unique):
    first = client.messages.schedule(endpoint.name, {"n": 1}, delay=Decimal("60.5"), idempotency_key=unique)
    again = client.messages.schedule(endpoint.name, {"n": 1}, delay=60.5, idempotency_key=unique)
    assert first.created is True and again.created is False and again.id == first.id


def test_deliver_at_and_reschedule(client, endpoint):
    at = datetime.now(timezone.utc) + timedelta(hours=2)
    message = client.messages.schedule(endpoint.name, "x", deliver_at=at)
    assert abs((message.due_at - at).total_seconds()) < 0.002
    later = at + timedelta(hours=1)
    moved = client.messages.reschedule(message.id, deliver_at=later)
    assert moved.id == message.id and abs((moved.due_at - later).total_seconds()) < 0.002
    assert len(moved.due_history) == 1


def test_a_short_delay_is_delivered(client, endpoint):
    import time

    message = client.messages.schedule(endpoint.name, {"soon": True}, delay=timedelta(seconds=1))
    deadline = time.monotonic() + 60
    while client.messages.get(message.id).status != "delivered":
        assert time.monotonic() < deadline, "not delivered within 60 s"
        time.sleep(0.3)
    delivered = client.messages.get(message.id)
    assert delivered.delivered_at >= delivered.due_at  # never early
    with pytest.raises(Conflict):
        client.messages.cancel(message.id)


def test_bulk_then_every_page_listed_once(client, endpoint):
    made = client.messages.schedule_many(
        [{"endpoint": endpoint.name, "payload": {"i": i}, "delay": 3600 + i} for i in range(120)])
    assert len(made) == 120 and len({m.id for m in made}) == 120
    listed = [m.id for m in client.messages.list(endpoint=endpoint.name)]
    assert sorted(listed) == sorted(m.id for m in made)  # 3 pages of 50, each message once
    assert len(client.messages.list(endpoint=endpoint.name).first(7)) == 7


def test_cancel_matching_counts_then_cancels_as_a_job(client, endpoint):
    client.messages.schedule_many([{"endpoint": endpoint.name, "payload": i, "delay": 7200} for i in range(5)])
    assert client.messages.cancel_matching(endpoint=endpoint.name, dry_run=True) == 5
    job = client.messages.cancel_matching(endpoint=endpoint.name)
    assert (job.kind, job.count, job.status_url.endswith(f"/api/bulk-actions/{job.id}/")) == ("cancel", 5, True)
    deadline = time.monotonic() + 30
    while not (job := client.bulk_actions.get(job.id)).finished and time.monotonic() < deadline:
        time.sleep(0.2)  # the platform's worker runs it
    assert (job.state, job.done) == ("done", 5)
    assert job.id in [j.id for j in client.bulk_actions.list()]
    assert {m.status for m in client.messages.list(endpoint=endpoint.name)} == {"cancelled"}
    assert client.messages.republish_matching(endpoint=endpoint.name, dry_run=True) == 0


def test_a_key_in_the_platform_s_schedule_namespace_is_refused(client, endpoint):
    with pytest.raises(BadRequest) as refused:
        client.messages.schedule(endpoint.name, {"x": 1}, delay=60, idempotency_key="schedule:nightly:1:0")
    assert "idempotency_key" in refused.value.fields


def test_errors_are_typed(client, endpoint, platform):
    with pytest.raises(BadRequest) as bad:
        client.messages.schedule(endpoint.name, {"x": 1}, delay=-5)
    assert "delay_seconds" in bad.value.fields and bad.value.status == 400
    with pytest.raises(BadRequest) as unknown:
        client.messages.schedule("no-such-endpoint", {}, delay=1)
    assert "endpoint" in unknown.value.fields
    with pytest.raises(NotFound):
        client.messages.get("00000000-0000-7000-8000-000000000000")
    with pytest.raises(Unauthorized), Client(platform.url, "dpk_not_a_real_key_at_all") as stranger:
        stranger.endpoints.list().first(1)
    with pytest.raises(ValueError):
        client.messages.schedule(endpoint.name, {}, deliver_at=datetime(2030, 1, 1))  # naive: refused here


def test_attempts_of_a_message_list(client, endpoint):
    message = client.messages.schedule(endpoint.name, {}, delay=3600)
    assert list(client.messages.attempts(message.id)) == []

"""Subscriptions and events through the client and delayctl, against the live platform: publish
once, one message per subscribed endpoint (the filter narrowing), idempotent, cancel."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from delayclient import BadRequest, NotFound

DELAYCTL = Path(sys.executable).parent / "delayctl"


def run(platform, *args):
    env = {**os.environ, "DELAY_PLATFORM_URL": platform.url, "DELAY_PLATFORM_KEY": platform.key}
    return subprocess.run([str(DELAYCTL), *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def two_endpoints(client, unique):
    return [client.endpoints.create(f"{unique}-{n}", handler="none").name for n in ("a", "b")]


def test_subscribe_publish_get_cancel(client, two_endpoints, unique):
    first, second = two_endpoints
    made = client.subscriptions.create(f"{unique}.#", first)
    client.subscriptions.create(f"{unique}.paid", second, filter={"amount": [10, 20]})
    assert made.topic == f"{unique}.#" and made.endpoint == first and made.filter == {}
    assert made.id in {s.id for s in client.subscriptions.list()}
    assert client.subscriptions.get(made.id).endpoint == first

    event = client.events.publish(f"{unique}.paid", {"amount": 10}, delay=3600, idempotency_key=f"{unique}-1")
    assert event.created is True
    assert sorted(m["endpoint"] for m in event.messages) == sorted(two_endpoints)
    assert client.messages.get(event.messages[0]["id"]).event == event.id
    filtered = client.events.publish(f"{unique}.paid", {"amount": 99}, delay=3600)
    assert [m["endpoint"] for m in filtered.messages] == [first]
    again = client.events.publish(f"{unique}.paid", {"amount": 10}, delay=3600, idempotency_key=f"{unique}-1")
    assert again.created is False and again.id == event.id
    assert client.events.get(event.id).messages == event.messages
    assert client.events.cancel(event.id) == 2
    assert client.events.cancel(event.id) == 0
    client.subscriptions.delete(made.id)
    with pytest.raises(NotFound):
        client.subscriptions.get(made.id)
    with pytest.raises(BadRequest):
        client.subscriptions.create("a.b*", first)


def test_delayctl_subscribe_publish_event_cancel(platform, client, two_endpoints, unique):
    first, _ = two_endpoints
    subscribed = run(platform, "subscribe", f"{unique}.*", first, "--filter", '{"kind": "x"}')
    assert subscribed.returncode == 0, subscribed.stderr
    assert subscribed.stdout.strip() in run(platform, "subscriptions", "--limit", "0").stdout
    published = run(platform, "publish", f"{unique}.made", "--delay", "3600", "--payload", '{"kind": "x"}')
    assert published.returncode == 0, published.stderr
    event_id = published.stdout.strip()
    shown = json.loads(run(platform, "--json", "event", event_id).stdout)
    assert shown["id"] == event_id and [m["endpoint"] for m in shown["messages"]] == [first]
    assert run(platform, "cancel-event", event_id).stdout.strip() == "1"
    assert run(platform, "unsubscribe", subscribed.stdout.strip()).returncode == 0
    bad = run(platform, "subscribe", "x", first, "--filter", "{nope")
    assert bad.returncode == 2

"""Notification routes and callbacks through the client against the real platform (issue 48)."""

import pytest

from delayclient import BadRequest, NotFound


def test_routes_made_listed_read_and_deleted(client, unique):
    made = client.endpoints.create(f"ops-{unique}")
    route = client.notifications.create(made.name, ["message.failed", "endpoint.disabled"])
    assert route.endpoint == made.name and route.events == ["message.failed", "endpoint.disabled"]
    assert route.created_at is not None and route.team
    assert route.id in [r.id for r in client.notifications.list()]
    assert client.notifications.get(route.id).events == route.events
    client.notifications.delete(route.id)
    with pytest.raises(NotFound):
        client.notifications.get(route.id)


def test_an_unknown_type_is_a_400_naming_it(client, unique):
    made = client.endpoints.create(f"ops2-{unique}")
    with pytest.raises(BadRequest) as refused:
        client.notifications.create(made.name, ["message.exploded"])
    assert "message.exploded" in str(refused.value)


def test_a_message_carries_its_callbacks(client, endpoint, unique):
    outcomes = client.endpoints.create(f"outcomes-{unique}")
    message = client.messages.schedule(endpoint.name, {"n": 1}, delay=3600, on_delivered=outcomes.name,
                                       on_failed=outcomes.name)
    assert (message.on_delivered, message.on_failed, message.notification) == (outcomes.name, outcomes.name, None)
    assert client.messages.get(message.id).on_delivered == outcomes.name
    (bulk,) = client.messages.schedule_many([{"endpoint": endpoint.name, "payload": {"n": 2}, "delay": 3600,
                                              "on_failed": outcomes.name}])
    assert client.messages.get(bulk.id).on_failed == outcomes.name
    with pytest.raises(BadRequest):
        client.messages.schedule(endpoint.name, {"n": 3}, delay=3600, on_failed=f"ghost-{unique}")

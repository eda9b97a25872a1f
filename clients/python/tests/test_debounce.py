"""Debounce through the client against the real platform (issue 49): the newest message of a key
replaces the waiting one, in one call or in a bulk; a bad debounce is the API's 400, naming it."""

import pytest

from delayclient import BadRequest


def test_the_newest_of_a_key_replaces_the_waiting_one(client, endpoint, unique):
    debounce = {"key": f"doc-{unique}", "seconds": 60, "max_seconds": 600, "mode": "trailing"}
    first = client.messages.schedule(endpoint.name, {"n": 1}, delay=0, debounce=debounce)
    second = client.messages.schedule(endpoint.name, {"n": 2}, delay=0, debounce=debounce)
    assert second.debounce["key"] == debounce["key"] and second.debounce["until"] == first.debounce["until"]
    assert client.messages.get(first.id).status == "superseded"
    bulk = client.messages.schedule_many([{"endpoint": endpoint.name, "payload": {"n": 3}, "delay": 0,
                                           "debounce": debounce}])
    assert client.messages.get(second.id).status == "superseded" and bulk[0].status in ("pending", "published")
    client.messages.cancel(bulk[0].id)


def test_a_bad_debounce_is_a_400_naming_its_field(client, endpoint):
    with pytest.raises(BadRequest) as refused:
        client.messages.schedule(endpoint.name, 1, delay=0, debounce={"key": "k", "seconds": 0, "max_seconds": 5})
    assert "debounce.seconds" in str(refused.value)

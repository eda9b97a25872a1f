"""Ordering keys through the client against the real platform (issue 49): the key is sent and shown,
in one call and in a bulk; a bad key is the API's 400, naming it; waiting_for is read."""

import pytest

from delayclient import BadRequest
from delayclient.models import Message


def test_the_key_is_sent_and_shown(client, endpoint, unique):
    one = client.messages.schedule(endpoint.name, {"n": 1}, delay=60, ordering_key=f"order-{unique}")
    assert one.ordering_key == f"order-{unique}" and one.waiting_since is None and one.waiting_for is None
    (bulk,) = client.messages.schedule_many([{"endpoint": endpoint.name, "payload": {"n": 2}, "delay": 60,
                                               "ordering_key": f"order-{unique}"}])
    assert client.messages.get(bulk.id).ordering_key == f"order-{unique}"
    for message in (one, bulk):
        client.messages.cancel(message.id)


def test_a_bad_key_is_a_400_naming_its_field(client, endpoint):
    with pytest.raises(BadRequest) as refused:
        client.messages.schedule(endpoint.name, 1, delay=0, ordering_key="k" * 201)
    assert "ordering_key" in str(refused.value)


def test_waiting_for_is_read_from_the_api():
    waiting = Message.from_api({"id": "m2", "status": "waiting", "ordering_key": "k", "waiting_for": "m1"})
    assert waiting.waiting_for == "m1" and Message.from_api({"id": "m3"}).waiting_for is None

"""Fixtures of the API's tests: endpoints made through the API itself, as a client makes them."""

import uuid

import pytest

from scheduling.models import Endpoint


@pytest.fixture
def endpoint(api, platform, endpoint_name, amqp):
    """The name of an endpoint the operator's key made through the API (team default, its queue
    declared on the broker and removed after the test)."""
    response = api.post("/api/endpoints/", {"name": endpoint_name}, format="json")
    assert response.status_code == 201, response.content
    yield endpoint_name
    amqp.delete_queue(response.json()["queue"])


@pytest.fixture
def teams(platform, team_key, amqp):
    """Teams a and b, each with a key of every scope and an endpoint `billing` (a webhook: it has
    a secret) made through the API."""
    made = {}
    for name in ("a", "b"):
        key = team_key(f"t{name}-{uuid.uuid4().hex[:6]}")
        response = key.post("/api/endpoints/", {"name": "billing", "handler": "webhook",
                                                "handler_target": "http://127.0.0.1:9/hook"}, format="json")
        assert response.status_code == 201, response.content
        made[name] = key
    yield made
    for endpoint in Endpoint.objects.all():
        amqp.delete_queue(endpoint.queue)

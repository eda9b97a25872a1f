"""Endpoints: create with the configured default version, the create rules on edit, moving an
active endpoint binds it first."""

import pytest
from django.core.exceptions import ValidationError

from scheduling.conf import broker
from scheduling.errors import Conflict
from scheduling.services import endpoint_create, endpoint_update
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]


def bound(prefix: str) -> set[str]:
    exchange = cascade.delivery_exchange(prefix)
    return {b["routing_key"] for b in broker().management.bindings_from(broker().vhost, exchange)}


def test_update_validates_like_create(platform, endpoint_name):
    endpoint = endpoint_create(name=endpoint_name)
    with pytest.raises(ValidationError) as error:
        endpoint_update(endpoint=endpoint, handler="webhook", handler_target="not a url")
    assert error.value.message_dict == {"handler_target": ["must be an http(s) URL"]}
    updated = endpoint_update(endpoint=endpoint, handler="webhook", handler_target="https://example.invalid/h")
    assert updated.handler == "webhook" and len(updated.webhook_secret) == 64  # a secret appears with the webhook


def test_moving_to_a_version_binds_there_or_refuses(platform, versions, endpoint_name, unique_prefix):
    endpoint = endpoint_create(name=endpoint_name, topology="v2")
    moved = endpoint_update(endpoint=endpoint, topology="v1")
    assert moved.topology.name == "v1" and f"#.{endpoint_name}" in bound(cascade.V1.prefix)
    versions["v2"].prefix = unique_prefix  # nothing declared there
    versions["v2"].save()
    with pytest.raises(Conflict, match="provision the cascade first"):
        endpoint_update(endpoint=moved, topology="v2")
    moved.refresh_from_db()
    assert moved.topology.name == "v1"


def test_new_endpoints_use_the_configured_default_version(platform, endpoint_name, settings):
    settings.DELAY_DEFAULT_VERSION = "v1"
    assert endpoint_create(name=endpoint_name).topology.name == "v1"
    settings.DELAY_DEFAULT_VERSION = "v2"
    assert endpoint_create(name=f"{endpoint_name}-2").topology.name == "v2"
    assert endpoint_create(name=f"{endpoint_name}-3", topology="v1").topology.name == "v1"  # asked for wins

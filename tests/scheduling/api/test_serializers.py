"""The API's serializers alone: they check types and shapes, map to the service's arguments,
and hold the bulk limit (DELAY_BULK_MAX); every rule about what may be scheduled is the
service's (tests/scheduling/services/test_messages.py)."""

import uuid
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from scheduling.api.serializers import (
    BulkCreateSerializer,
    EndpointSerializer,
    MessageCreatedSerializer,
    MessageCreateSerializer,
    VersionField,
)
from scheduling.models import Endpoint, ScheduledMessage, TopologyVersion

pytestmark = pytest.mark.django_db


def item(**fields):
    return {"endpoint": "billing", "payload": {"n": 1}, "delay_seconds": "2.5", **fields}


def test_a_message_maps_to_the_services_arguments():
    serializer = MessageCreateSerializer(data=item(idempotency_key="k"))
    assert serializer.is_valid(), serializer.errors
    assert serializer.to_item() == {"endpoint": "billing", "payload": {"n": 1}, "delay": Decimal("2.5"),
                                    "deliver_at": None, "idempotency_key": "k"}


@pytest.mark.parametrize(("data", "field"), [
    (item(delay_seconds="soon"), "delay_seconds"),
    (item(deliver_at="tomorrow"), "deliver_at"),
    (item(endpoint="x" * 101), "endpoint"),
    (item(idempotency_key="k" * 256), "idempotency_key"),
    ({"endpoint": "billing", "delay_seconds": 1}, "payload"),
])
def test_wrong_types_and_shapes_name_the_field(data, field):
    serializer = MessageCreateSerializer(data=data)
    assert not serializer.is_valid() and field in serializer.errors


@pytest.mark.parametrize(("limit", "count", "valid"), [(1000, 1000, True), (1000, 1001, False), (3, 3, True),
                                                       (3, 4, False)])
def test_bulk_holds_the_configured_limit(settings, limit, count, valid):
    settings.DELAY_BULK_MAX = limit
    serializer = BulkCreateSerializer(data={"messages": [item() for _ in range(count)]})
    assert serializer.is_valid() is valid
    if not valid:
        assert serializer.errors["messages"]["non_field_errors"] == [
            f"Ensure this field has no more than {limit} elements."]


def test_bulk_refuses_an_empty_list():
    serializer = BulkCreateSerializer(data={"messages": []})
    assert not serializer.is_valid() and "messages" in serializer.errors


def test_version_field_refuses_what_the_database_cannot_compare(versions):
    field = VersionField()
    assert field.to_internal_value("v2") == versions["v2"]
    for bad in ("v9", "v2\x00"):
        with pytest.raises(Exception, match="Invalid value|does not exist"):
            field.to_internal_value(bad)


def test_endpoint_counts_come_from_the_annotations(versions):
    endpoint = Endpoint(name="billing", topology=versions["v2"])
    endpoint.n_pending, endpoint.n_delivered = 2, 5
    counts = EndpointSerializer(endpoint).data["message_counts"]
    assert counts == {"pending": 2, "published": 0, "delivered": 5, "cancelled": 0, "failed": 0}
    assert "webhook_secret" not in EndpointSerializer(endpoint).data


def test_the_lean_bulk_answer_has_the_fields_it_declares():
    version = TopologyVersion(name="v2", prefix="dp.v2.")
    message = ScheduledMessage(id=uuid.uuid4(), endpoint=Endpoint(name="billing", topology=version), topology=version,
                               due_at=datetime(2026, 11, 22, 12, 0, 0, 250000, tzinfo=timezone.utc),
                               requested_delay_ms=2500, routing_key="0.1.billing", idempotency_key=None)
    built = MessageCreatedSerializer.represent(message)
    assert set(built) == set(MessageCreatedSerializer().fields)
    assert built["due_at"] == "2026-11-22T12:00:00.250000Z" and built["status"] == "pending"

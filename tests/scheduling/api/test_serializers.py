"""The API's serializers alone: they check types and shapes, map to the service's arguments,
and hold the bulk limit (DELAY_BULK_MAX); every rule about what may be scheduled is the
service's (tests/scheduling/messages/test_services.py)."""

import uuid
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from rest_framework import serializers

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
    assert serializer.to_item() == {"team": None, "endpoint": "billing", "payload": {"n": 1}, "delay": Decimal("2.5"),
                                    "deliver_at": None, "idempotency_key": "k", "on_delivered": None,
                                    "on_failed": None, "expires_at": None, "expire_after_seconds": None,
                                    "debounce": None, "flow_key": None, "ordering_key": None}
    keyed = MessageCreateSerializer(data=item(flow_key="account-42"))
    assert keyed.is_valid(), keyed.errors
    assert keyed.to_item()["flow_key"] == "account-42"


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


def test_endpoint_counts_come_from_the_views_counts_and_name_the_estimates(versions):
    from scheduling.db.counts import Tally

    endpoint = Endpoint(pk=7, team=TEAM, name="billing", queue="billing", topology=versions["v2"])
    counts = {7: {"pending": Tally(2), "published": Tally(0), "delivered": Tally(5_000_000, exact=False),
                  "cancelled": Tally(0), "failed": Tally(1), "expired": Tally(3), "superseded": Tally(0),
                  "waiting": Tally(0), "skipped": Tally(0)}}
    data = EndpointSerializer(endpoint, context={"message_counts": counts}).data
    assert data["message_counts"] == {"pending": 2, "published": 0, "delivered": 5_000_000, "cancelled": 0, "failed": 1,
                                      "expired": 3, "superseded": 0, "waiting": 0, "skipped": 0}
    assert data["message_counts_estimated"] == ["delivered"]
    assert "webhook_secret" not in data
    assert EndpointSerializer(endpoint).data["message_counts"] == dict.fromkeys(counts[7], 0)  # none computed


def test_the_lean_bulk_answer_has_the_fields_it_declares():
    version = TopologyVersion(name="v2", prefix="dp.v2.")
    message = ScheduledMessage(id=uuid.uuid4(), endpoint=Endpoint(team=TEAM, name="billing", queue="billing", topology=version), topology=version,
                               due_at=datetime(2026, 11, 22, 12, 0, 0, 250000, tzinfo=timezone.utc),
                               requested_delay_ms=2500, routing_key="0.1.billing", idempotency_key=None)
    built = MessageCreatedSerializer.represent(message)
    assert set(built) == set(MessageCreatedSerializer().fields)
    assert built["due_at"] == "2026-11-22T12:00:00.250000Z" and built["status"] == "pending"


# --- the short path for plain messages gives what the fields give --------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from scheduling.api.serializers import _plain_message  # noqa: E402
from scheduling.models.teams import Team  # noqa: E402

TEAM = Team(pk=1, name="default")  # an unsaved row's team: no query for the default

VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                   st.text(max_size=12), st.sampled_from([" 1", "1e3", "nan", "inf", "-0.5", "1e999999", "", "x" * 101,
                                                          " billing", "billing"]),
                   st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
MESSAGES = st.dictionaries(st.sampled_from(["endpoint", "payload", "delay_seconds", "deliver_at", "idempotency_key",
                                            "other"]), VALUES, max_size=5)


@settings(max_examples=1500, deadline=None)
@given(MESSAGES)
def test_the_short_path_agrees_with_the_fields(data):
    plain = _plain_message(data)
    serializer = MessageCreateSerializer(data=data)
    full = serializers.Serializer.run_validation  # the fields' way, without the short path
    try:
        expected = dict(full(serializer, data))
    except Exception:  # the fields refuse it: the short path must not accept it
        assert plain is None
        return
    if plain is not None:
        assert plain == expected


@pytest.mark.parametrize("data", [item(), item(delay_seconds=2), item(delay_seconds=2.5, idempotency_key="k"),
                                  {"endpoint": "billing", "payload": [1], "delay_seconds": "0.001"}])
def test_ordinary_messages_take_the_short_path(data):
    full = serializers.Serializer.run_validation
    assert _plain_message(data) == dict(full(MessageCreateSerializer(data=data), data))

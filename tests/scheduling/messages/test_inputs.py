"""A schedule request's input checked (messages/inputs.py), through message_schedule on the real
database: the delay or deliver-at time to a due time, every bad field named and nothing stored,
the endpoint named, the payload's JSON and its limit, the flow key."""

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from scheduling.core.text import NUL_CHARACTERS
from scheduling.messages.services import message_schedule
from scheduling.models import ScheduledMessage
from tests.scheduling.messages.conftest import schedule

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


@pytest.mark.parametrize(
    ("delay", "expected_ms"),
    [(0, 0), (10, 10_000), (10.25, 10_250), (Decimal("0.0011"), 2), (timedelta(seconds=1, microseconds=1), 1001),
     ("2.5", 2500), (268_435_455, 268_435_455_000)],
)
def test_delay_becomes_a_due_time_with_millisecond_precision(endpoint, delay, expected_ms):
    before = timezone.now()
    message = schedule(endpoint, delay=delay)
    assert message.status == Status.PUBLISHED  # written so, published after the commit (relay_claim_new)
    assert message.requested_delay_ms == expected_ms
    assert message.due_at.microsecond % 1000 == 0
    assert message.due_at - before >= timedelta(milliseconds=expected_ms)  # never shortened
    assert message.due_at - before < timedelta(milliseconds=expected_ms + 50)
    assert message.topology.name == "v2"


def test_deliver_at_in_the_past_is_due_now(endpoint):
    past = timezone.now() - timedelta(hours=1)
    message = schedule(endpoint, deliver_at=past)
    assert message.requested_delay_ms == 0
    assert abs(message.due_at - past) < timedelta(milliseconds=1)


@pytest.mark.parametrize(
    ("kwargs", "field", "text"),
    [
        ({"delay": -1}, "delay", "must not be negative"),
        ({"delay": 268_435_455.001}, "delay", "over the maximum delay of 268,435,455 s"),
        ({"delay": 10**30}, "delay", "over the maximum delay"),  # found by the fuzzer: overflowed
        ({"delay": "1e999999"}, "delay", "over the maximum delay"),  # Decimal overflow once: clamped first
        ({"delay": Decimal("-1e999999")}, "delay", "must not be negative"),
        ({"deliver_at": datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt_timezone.utc)}, "deliver_at",
         "over the maximum delay"),  # rounding it up to the millisecond overflowed
        ({"deliver_at": datetime(1, 1, 1, tzinfo=dt_timezone.utc)}, "deliver_at", "further in the past than"),
        ({}, "delay", "exactly one"),
        ({"delay": 1, "deliver_at": datetime(2030, 1, 1, tzinfo=dt_timezone.utc)}, "delay", "exactly one"),
        ({"deliver_at": datetime(2030, 1, 1)}, "deliver_at", "with a timezone"),
        ({"deliver_at": datetime(2040, 1, 1, tzinfo=dt_timezone.utc)}, "deliver_at", "over the maximum delay"),
        ({"delay": "soon"}, "delay", "number of seconds"),
        ({"delay": float("inf")}, "delay", "finite"),
        ({"delay": True}, "delay", "number of seconds"),
        ({"delay": 1, "payload": {1, 2}}, "payload", "must be JSON"),
        ({"delay": 1, "payload": float("nan")}, "payload", "must be JSON"),
        ({"delay": 1, "payload": "x" * (256 * 1024)}, "payload", "the limit is 262,144"),
        ({"delay": 1, "idempotency_key": ""}, "idempotency_key", "1 to 255"),
        ({"delay": 1, "payload": None}, "payload", "except null"),
        ({"delay": 1, "idempotency_key": "k" * 256}, "idempotency_key", "1 to 255"),
        # the one rule and its words (core/text.py)
        ({"delay": 1, "idempotency_key": "a\x00b"}, "idempotency_key", f"without {NUL_CHARACTERS}"),
        ({"delay": 1, "flow_key": "a\x00b"}, "flow_key", f"without {NUL_CHARACTERS}"),
        ({"delay": 1, "payload": {"k": "a\x00"}}, "payload", f"must not contain {NUL_CHARACTERS}"),
        ({"delay": 1, "payload": [{"\x00": 1}]}, "payload", f"must not contain {NUL_CHARACTERS}"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(endpoint, kwargs, field, text):
    with pytest.raises(ValidationError) as caught:
        schedule(endpoint, **kwargs)
    assert text in " ".join(caught.value.message_dict[field])
    assert ScheduledMessage.objects.count() == 0


def test_payload_at_exactly_the_limit_is_accepted(endpoint):
    payload = "x" * (256 * 1024 - 2)  # two quote characters make 262,144 bytes of JSON
    assert schedule(endpoint, delay=1, payload=payload).payload == payload


def test_unknown_and_inactive_endpoints_are_refused(endpoint):
    with pytest.raises(ValidationError, match="unknown endpoint 'nope'"):
        message_schedule(endpoint="nope", payload={}, delay=1)
    with pytest.raises(ValidationError, match="unknown endpoint"):
        message_schedule(endpoint="no\x00pe", payload={}, delay=1)
    endpoint.is_active = False
    endpoint.save()
    with pytest.raises(ValidationError, match="is inactive"):
        schedule(endpoint, delay=1)
    assert ScheduledMessage.objects.count() == 0


@pytest.mark.parametrize("flow_key", ["", "x" * 201, 5, "a\x00b"])
def test_a_flow_key_is_a_short_string_without_nul(endpoint, flow_key):
    with pytest.raises(ValidationError) as refused:
        schedule(endpoint, delay=5, flow_key=flow_key)
    assert "flow_key" in refused.value.message_dict and not ScheduledMessage.objects.exists()
    assert schedule(endpoint, delay=5, flow_key="x" * 200).flow_key == "x" * 200



@pytest.mark.parametrize(("payload", "stored"), [
    ({"a": [1, 2.5, "é€😀", None, True]}, {"a": [1, 2.5, "é€😀", None, True]}),  # orjson's text
    ({1: "int key"}, {"1": "int key"}),  # as json.dumps writes it
    ({"big": 2**70}, {"big": 2**70}),  # past 64 bits: json's text, exact
])
def test_the_payload_is_stored_as_json_reads_it_back(endpoint, payload, stored):
    message = schedule(endpoint, delay=5, payload=payload)
    assert ScheduledMessage.objects.get(id=message.id).payload == stored


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"deep": [float("-inf")]}, {"x": object()}])
def test_a_payload_json_cannot_encode_is_refused_and_nothing_stored(endpoint, bad):
    with pytest.raises(ValidationError, match="must be JSON"):
        schedule(endpoint, delay=5, payload=bad)
    assert not ScheduledMessage.objects.exists()


"""Bad input as a class: control characters in any string field of any API serializer (found by
walking the serializers, so a new one is covered), overflowing delays and dates, each a 400
naming the field, with nothing stored — for single and bulk requests alike."""

import inspect
import json

import pytest
from rest_framework import serializers

from scheduling.api import serializers as api_serializers
from scheduling.api.validation import MESSAGE
from scheduling.core.text import has_control_characters
from scheduling.models import Endpoint, ScheduledMessage

REFUSED = ["\x00", "\x01", "\t", "\n", "\r", "\x1b", "\x1f", "\x7f", "\x80", "\x85", "\x9f", "\ud800", "\udfff"]
pytestmark = pytest.mark.django_db
ALLOWED = ["", "plain", "ünïcödé", "emoji \U0001F600", "\u00a0", "\u2028", "tab-free", "2030-01-01T00:00:00Z"]


@pytest.mark.parametrize("char", REFUSED)
def test_control_characters_and_lone_surrogates_are_refused(char):
    assert has_control_characters(f"a{char}b") and has_control_characters(char)


@pytest.mark.parametrize("text", ALLOWED)
def test_ordinary_text_is_allowed(text):
    assert not has_control_characters(text)


# Serializers that only shape answers (no request is ever read through them).
RESPONSE_ONLY = {"MessageCreatedSerializer", "StatusSerializer", "SecretRotatedSerializer", "CountSerializer",
                 "RunsSerializer"}


def writable_string_fields():
    """(serializer class, field name) for every input field of every serializer of the API."""
    for _, cls in inspect.getmembers(api_serializers, inspect.isclass):
        if (not issubclass(cls, serializers.Serializer) or cls.__module__ != api_serializers.__name__
                or cls.__name__ in RESPONSE_ONLY):
            continue
        for name, field in cls().fields.items():
            if not field.read_only and not isinstance(field, serializers.JSONField):
                yield cls, name


FIELDS = list(writable_string_fields())


def test_the_walk_finds_the_input_serializers():
    found = {(cls.__name__, name) for cls, name in FIELDS}
    assert {("MessageCreateSerializer", "deliver_at"), ("MessageCreateSerializer", "endpoint"),
            ("EndpointSerializer", "handler_target"), ("EndpointUpdateSerializer", "topology"),
            ("MessageFilterSerializer", "status"), ("BulkCreateSerializer", "messages")} <= found


@pytest.mark.parametrize(("cls", "name"), FIELDS, ids=[f"{c.__name__}.{n}" for c, n in FIELDS])
@pytest.mark.parametrize("char", ["\x00", "\x1f", "\x85", "\ud800"])
def test_every_input_field_of_every_serializer_refuses_them(cls, name, char):
    serializer = cls(data={name: f"v2{char}"})
    assert not serializer.is_valid()
    assert serializer.errors[name] == [MESSAGE], serializer.errors


# --- through the API: 400 naming the field, nothing stored ---------------------------------------


def post_json(api, path, body):
    """Sent as ASCII JSON (escapes), so lone surrogates travel as the attacker would send them."""
    return api.post(path, json.dumps(body), content_type="application/json")


def field_errors(response, bulk: bool) -> dict:
    body = response.json()
    if not bulk:
        return body
    items = body["messages"]
    return items["0"] if isinstance(items, dict) else items[0]


BAD_MESSAGE_FIELDS = [
    # control characters (the date parser stopped at the NUL and the row was stored)
    ("deliver_at", "2030-01-01T00:00:00Z\x00", "control characters"),
    ("deliver_at", "2030-01-01T00:00:00\x00Z", "control characters"),
    ("deliver_at", "2030-01-01T00:00:00Z\u0085", "control characters"),
    ("endpoint", "{endpoint}\x00", "control characters"),
    ("endpoint", "{endpoint}\n", "control characters"),
    ("endpoint", "\ud800", "control characters"),
    ("idempotency_key", "key\x00", "control characters"),
    ("idempotency_key", "key\x1b[31m", "control characters"),
    ("delay_seconds", "1\x00", "control characters"),
    # overflowing delays: checked before any arithmetic
    ("delay_seconds", "1e999999", "over the maximum delay"),
    ("delay_seconds", "-1e999999", "must not be negative"),
    ("delay_seconds", "NaN", "valid number"),
    ("delay_seconds", "Infinity", "valid number"),
    ("delay_seconds", "-Infinity", "valid number"),
    ("delay_seconds", 10**400, "over the maximum delay"),
    ("delay_seconds", -(10**400), "must not be negative"),
    ("delay_seconds", 1e308, "over the maximum delay"),
    ("delay_seconds", "9" * 1000, "over the maximum delay"),
    ("delay_seconds", "9" * 1001, "too large"),
    # dates at the ends of the calendar: checked before rounding to milliseconds
    ("deliver_at", "9999-12-31T23:59:59.999999Z", "over the maximum delay"),
    ("deliver_at", "0001-01-01T00:00:00Z", "further in the past than the maximum delay"),
    ("deliver_at", "0001-01-01T00:00:00+14:00", "out of range"),
    ("deliver_at", "9999-12-31T23:59:59.999999-14:00", "out of range"),
]


@pytest.mark.parametrize("bulk", [False, True], ids=["single", "bulk"])
@pytest.mark.parametrize(("field", "value", "text"), BAD_MESSAGE_FIELDS,
                         ids=[f"{f}={v!r:.30}" for f, v, _ in BAD_MESSAGE_FIELDS])
def test_bad_message_field_is_400_naming_it_and_stores_nothing(api, endpoint, field, value, text, bulk):
    message = {"endpoint": endpoint, "payload": {"a": 1}, **({} if field == "deliver_at" else {"delay_seconds": 1})}
    message[field] = value.format(endpoint=endpoint) if isinstance(value, str) else value
    good = {"endpoint": endpoint, "payload": {"b": 2}, "delay_seconds": 5}
    response = (post_json(api, "/api/messages/bulk/", {"messages": [message, good]}) if bulk
                else post_json(api, "/api/messages/", message))
    assert response.status_code == 400, response.content
    assert text in " ".join(field_errors(response, bulk)[field]), response.json()
    assert ScheduledMessage.objects.count() == 0


@pytest.mark.parametrize("text", ["nul \x00", "\x00", "k\x00ey"])
def test_a_nul_in_the_payload_is_refused_anywhere(api, endpoint, text):
    for payload in ({"t": text}, [text], {text: 1}, text):
        response = post_json(api, "/api/messages/", {"endpoint": endpoint, "payload": payload, "delay_seconds": 1})
        assert response.status_code == 400 and "NUL" in response.json()["payload"][0]
    assert ScheduledMessage.objects.count() == 0


def test_other_control_characters_in_the_payload_are_data(api, endpoint):
    payload = {"text": "line\nnext\ttab\x1b", "\r": "\x85"}
    response = post_json(api, "/api/messages/", {"endpoint": endpoint, "payload": payload, "delay_seconds": 1})
    assert response.status_code == 201 and ScheduledMessage.objects.get().payload == payload


@pytest.mark.parametrize(("field", "value"), [
    ("name", "ok\x00"), ("name", "ok\x7f"), ("handler_target", "https://example.com/\x00"),
    ("handler_target", "https://example.com/\r\nX-Evil: 1"), ("handler", "webhook\x00"), ("topology", "v2\x1f"),
    ("delivery_mode", "native\x00"), ("webhook_secret", "whsec_" + "A" * 32 + "\x00"),
])
def test_bad_endpoint_field_is_400_naming_it_and_stores_nothing(api, platform, field, value):
    body = {"name": "fine", "handler": "webhook", "handler_target": "https://example.com/hook", field: value}
    response = post_json(api, "/api/endpoints/", body)
    assert response.status_code == 400 and response.json()[field] == [MESSAGE], response.json()
    assert not Endpoint.objects.exists()


@pytest.mark.parametrize(("field", "value"), [("topology", "v2\x00"), ("delivery_mode", "\ud800")])
def test_an_endpoint_change_with_them_is_400_and_changes_nothing(api, endpoint, field, value):
    response = api.patch(f"/api/endpoints/{endpoint}/", json.dumps({field: value}), content_type="application/json")
    assert response.status_code == 400 and response.json()[field] == [MESSAGE]
    assert Endpoint.objects.get(name=endpoint).topology.name == "v3"


@pytest.mark.parametrize("query", ["endpoint=a%00b", "status=pending%00", "endpoint=%C2%85", "status=later"])
def test_the_message_lists_filters_are_checked(api, endpoint, query):
    response = api.get(f"/api/messages/?{query}")
    assert response.status_code == 400 and set(response.json()) <= {"endpoint", "status"}, response.content


def test_a_number_beyond_the_parsers_limit_is_a_400(api, endpoint):
    body = f'{{"endpoint": "{endpoint}", "payload": 1, "delay_seconds": {"9" * 5000}}}'
    response = api.post("/api/messages/", body, content_type="application/json")
    assert response.status_code == 400 and "JSON parse error" in response.json()["detail"]
    body = f'{{"endpoint": "{endpoint}", "payload": 1, "delay_seconds": 1e999999}}'  # a float: infinity
    response = api.post("/api/messages/", body, content_type="application/json")
    assert response.status_code == 400 and "delay_seconds" in response.json()
    assert ScheduledMessage.objects.count() == 0

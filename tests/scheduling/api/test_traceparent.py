"""The W3C traceparent a caller sends when scheduling (POST /api/messages/ and /bulk/): kept with each
message when valid, ignored when not (W3C Trace Context: the message starts no trace of the
caller's, and the request is not refused); tracing is off here, so it is kept as it came."""

import pytest

from scheduling.models import ScheduledMessage
from scheduling.observability import tracing

pytestmark = [pytest.mark.django_db, pytest.mark.broker]

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_tracing_is_off_by_default():
    assert tracing.ENABLED is False


@pytest.mark.parametrize(("sent", "kept"), [
    (VALID, VALID),
    (None, None),
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", None),
    ("00-" + "a" * 5000, None),
])
def test_a_message_keeps_a_valid_traceparent_and_ignores_another(api, endpoint, sent, kept):
    headers = {"HTTP_TRACEPARENT": sent} if sent is not None else {}
    response = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 60}, format="json",
                        **headers)
    assert response.status_code == 201, response.content
    assert ScheduledMessage.objects.get(id=response.json()["id"]).traceparent == kept


def test_a_bulk_request_s_traceparent_is_each_message_s(api, endpoint):
    response = api.post("/api/messages/bulk/", {"messages": [{"endpoint": endpoint, "payload": {"n": n},
                                                              "delay_seconds": 60} for n in range(3)]},
                        format="json", HTTP_TRACEPARENT=VALID)
    assert response.status_code == 201, response.content
    ids = [m["id"] for m in response.json()["messages"]]
    assert list(ScheduledMessage.objects.filter(id__in=ids).values_list("traceparent", flat=True)) == [VALID] * 3


def test_the_schema_names_the_header(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    for path in ("/api/messages/", "/api/messages/bulk/"):
        names = {(p["name"], p["in"]) for p in schema["paths"][path]["post"].get("parameters", [])}
        assert ("traceparent", "header") in names, path

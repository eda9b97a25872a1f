"""Flow control by key through the API (docs/guides/flow-control.md "By key"): a message's
flow_key, an endpoint's max_deliveries_per_second_per_key and max_concurrent_per_key, validated as
the endpoint's own limits are, and a person's change audited."""

import pytest

from scheduling.models import AuditEvent, Endpoint, ScheduledMessage


@pytest.mark.parametrize(("body", "field"), [
    ({"max_deliveries_per_second_per_key": 0}, "max_deliveries_per_second_per_key"),
    ({"max_deliveries_per_second_per_key": 100_001}, "max_deliveries_per_second_per_key"),
    ({"max_concurrent_per_key": 2}, "max_concurrent_per_key"),  # no calls to count: webhooks only
    ({"handler": "webhook", "handler_target": "http://127.0.0.1:9/h", "max_concurrent_per_key": 1001},
     "max_concurrent_per_key"),
    ({"handler": "celery_queue", "max_deliveries_per_second_per_key": 5}, "max_deliveries_per_second_per_key"),
])
def test_bad_per_key_limits_are_400_naming_the_field(api, platform, endpoint_name, body, field):
    response = api.post("/api/endpoints/", {"name": endpoint_name, **body}, format="json")
    assert response.status_code == 400 and field in response.json(), response.json()
    assert not Endpoint.objects.exists()


def test_per_key_limits_are_set_read_cleared_and_audited(api, platform, endpoint_name, amqp):
    created = api.post("/api/endpoints/", {"name": endpoint_name, "handler": "webhook",
                                           "handler_target": "http://127.0.0.1:9/hook",
                                           "max_deliveries_per_second_per_key": 5}, format="json")
    assert created.status_code == 201, created.content
    assert (created.json()["max_deliveries_per_second_per_key"], created.json()["max_concurrent_per_key"]) == (5, None)
    try:
        changed = api.patch(f"/api/endpoints/{endpoint_name}/", {"max_concurrent_per_key": 2}, format="json")
        assert changed.status_code == 200
        assert (changed.json()["max_deliveries_per_second_per_key"], changed.json()["max_concurrent_per_key"]) == (5, 2)
        update = AuditEvent.objects.filter(action="endpoint.update").latest("pk")
        assert (update.before, update.after) == ({"max_concurrent_per_key": None}, {"max_concurrent_per_key": 2})
        cleared = api.patch(f"/api/endpoints/{endpoint_name}/", {"max_deliveries_per_second_per_key": None},
                            format="json")
        assert cleared.json()["max_deliveries_per_second_per_key"] is None
        refused = api.patch(f"/api/endpoints/{endpoint_name}/", {"handler": "none"}, format="json")
        assert refused.status_code == 400 and "max_concurrent_per_key" in refused.json()  # webhooks only
    finally:
        amqp.delete_queue(created.json()["queue"])


def test_a_messages_flow_key_is_kept_and_answered(api, endpoint):
    created = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 60,
                                          "flow_key": "customer-42"}, format="json")
    assert created.status_code == 201, created.content
    message = ScheduledMessage.objects.get()
    assert message.flow_key == "customer-42"
    assert api.get(f"/api/messages/{message.id}/").json()["flow_key"] == "customer-42"
    bulk = api.post("/api/messages/bulk/", {"messages": [{"endpoint": endpoint, "payload": {}, "delay_seconds": 60,
                                                          "flow_key": "k"}, {"endpoint": endpoint, "payload": {},
                                                                             "delay_seconds": 60}]}, format="json")
    assert bulk.status_code == 201, bulk.content
    assert set(ScheduledMessage.objects.values_list("flow_key", flat=True)) == {"customer-42", "k", None}


@pytest.mark.parametrize("flow_key", ["", "x" * 201, ["k"], {"k": 1}, "a\x00b"])
def test_a_bad_flow_key_is_400_naming_the_field(api, endpoint, flow_key):
    response = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 60,
                                           "flow_key": flow_key}, format="json")
    assert response.status_code == 400 and "flow_key" in response.json(), response.json()
    assert not ScheduledMessage.objects.exists()

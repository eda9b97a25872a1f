"""POST/GET/DELETE /api/subscriptions/, POST /api/events/, GET /api/events/<id>/, POST
/api/events/<id>/cancel/ through the real API (keys, scopes, teams); the message answer names
its event."""

import pytest
from django.utils import timezone

from scheduling.models import Endpoint, Event, ScheduledMessage, Subscription
from tests.conftest import team_named

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoints(versions):
    def make(team, *names):
        return [Endpoint.objects.create(team=team_named(team), name=name, queue=f"{team}--{name}",
                                        topology=versions["v3"]) for name in names]
    return make


def subscribe(client, **body):
    return client.post("/api/subscriptions/", body, format="json")


def test_subscriptions_create_list_get_delete(team_key, endpoints):
    endpoints("billing", "ledger")
    client = team_key("billing")
    made = subscribe(client, topic="invoice.*", endpoint="ledger", filter={"customer.country": ["FR"]})
    assert made.status_code == 201, made.content
    body = made.json()
    assert set(body) == {"id", "team", "topic", "endpoint", "filter", "created_at"}
    assert (body["team"], body["topic"], body["endpoint"]) == ("billing", "invoice.*", "ledger")
    assert body["filter"] == {"customer.country": ["FR"]}
    listed = client.get("/api/subscriptions/").json()
    assert [s["id"] for s in listed["results"]] == [body["id"]] and "next" in listed
    assert client.get(f"/api/subscriptions/{body['id']}/").json()["topic"] == "invoice.*"
    assert client.delete(f"/api/subscriptions/{body['id']}/").status_code == 204
    assert client.get(f"/api/subscriptions/{body['id']}/").status_code == 404
    assert not Subscription.objects.exists()


@pytest.mark.parametrize("body, field", [
    ({"topic": "invoice.pa*d", "endpoint": "ledger"}, "topic"),
    ({"topic": "a..b", "endpoint": "ledger"}, "topic"),
    ({"topic": "a", "endpoint": "nope"}, "endpoint"),
    ({"topic": "a", "endpoint": "ledger", "filter": {"a": {"b": 1}}}, "filter"),
    ({"topic": "a", "endpoint": "ledger", "filter": [1]}, "filter"),
    ({"endpoint": "ledger"}, "topic"),
])
def test_bad_subscriptions_are_400_naming_the_field(team_key, endpoints, body, field):
    endpoints("billing", "ledger")
    answer = subscribe(team_key("billing"), **body)
    assert answer.status_code == 400 and field in answer.json(), answer.content


def test_subscriptions_are_paged_by_cursor(team_key, endpoints):
    endpoints("billing", "ledger")
    client = team_key("billing")
    for i in range(53):
        assert subscribe(client, topic=f"t{i}", endpoint="ledger").status_code == 201
    first = client.get("/api/subscriptions/").json()
    assert len(first["results"]) == 50 and first["next"]
    second = client.get(first["next"]).json()
    assert len(second["results"]) == 3 and not second["next"]
    assert len({s["id"] for s in first["results"] + second["results"]}) == 53
    assert client.get("/api/subscriptions/?cursor=garbage").status_code == 400


def test_another_teams_subscriptions_are_404_and_never_listed(team_key, endpoints):
    endpoints("billing", "ledger")
    endpoints("shipping", "ledger")
    theirs = subscribe(team_key("shipping"), topic="#", endpoint="ledger").json()
    client = team_key("billing")
    assert client.get(f"/api/subscriptions/{theirs['id']}/").status_code == 404
    assert client.delete(f"/api/subscriptions/{theirs['id']}/").status_code == 404
    assert client.get("/api/subscriptions/not-a-uuid/").status_code == 404
    assert client.get("/api/subscriptions/").json()["results"] == []


def test_subscribing_needs_the_endpoints_scope(team_key, endpoints):
    endpoints("billing", "ledger")
    answer = subscribe(team_key("billing", "read", "write"), topic="a", endpoint="ledger")
    assert answer.status_code == 403


def test_publish_get_cancel(team_key, endpoints):
    endpoints("billing", "ledger", "mailer", "analytics")
    admin = team_key("billing")
    subscribe(admin, topic="invoice.paid", endpoint="ledger")
    subscribe(admin, topic="invoice.*", endpoint="mailer", filter={"amount": [10, 20]})
    subscribe(admin, topic="order.#", endpoint="analytics")
    writer = team_key("billing", "write", "read", "cancel")
    answer = writer.post("/api/events/", {"topic": "invoice.paid", "payload": {"amount": 10},
                                          "delay_seconds": 3600, "idempotency_key": "inv-1"}, format="json")
    assert answer.status_code == 201, answer.content
    event = answer.json()
    assert {"id", "topic", "due_at", "messages"} <= set(event)
    assert sorted(m["endpoint"] for m in event["messages"]) == ["ledger", "mailer"]
    message = writer.get(f"/api/messages/{event['messages'][0]['id']}/").json()
    assert message["event"] == event["id"]
    listed = writer.get("/api/messages/").json()["results"]
    assert {m["event"] for m in listed} == {event["id"]}
    again = writer.post("/api/events/", {"topic": "invoice.paid", "payload": {"amount": 10},
                                         "delay_seconds": 3600, "idempotency_key": "inv-1"}, format="json")
    assert again.status_code == 200 and again.json() == event
    assert writer.get(f"/api/events/{event['id']}/").json() == event
    cancelled = writer.post(f"/api/events/{event['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json() == {"cancelled": 2}
    assert set(ScheduledMessage.objects.values_list("status", flat=True)) == {"cancelled"}
    assert writer.post(f"/api/events/{event['id']}/cancel/").json() == {"cancelled": 0}


def test_an_event_nobody_subscribed_to_is_201_with_no_messages(team_key, endpoints):
    answer = team_key("billing").post("/api/events/", {"topic": "quiet.topic", "payload": {"a": 1},
                                                       "deliver_at": timezone.now().isoformat()}, format="json")
    assert answer.status_code == 201 and answer.json()["messages"] == []
    assert Event.objects.get().message_count == 0


@pytest.mark.parametrize("body, field", [
    ({"topic": "a.*", "payload": {}, "delay_seconds": 1}, "topic"),
    ({"topic": "a", "payload": {}}, "delay_seconds"),
    ({"topic": "a", "payload": {}, "delay_seconds": -1}, "delay_seconds"),
    ({"topic": "a", "payload": {}, "delay_seconds": 1, "deliver_at": "2030-01-01T00:00:00Z"}, "delay_seconds"),
    ({"topic": "a", "delay_seconds": 1}, "payload"),
    ({"topic": "a", "payload": {}, "delay_seconds": 1, "idempotency_key": "x" * 256}, "idempotency_key"),
])
def test_bad_events_are_400_naming_the_field(team_key, body, field):
    answer = team_key("billing").post("/api/events/", body, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.content
    assert not Event.objects.exists()


def test_another_teams_event_is_404_and_its_subscriptions_never_match(team_key, endpoints):
    endpoints("billing", "ledger")
    endpoints("shipping", "ledger")
    subscribe(team_key("shipping"), topic="#", endpoint="ledger")
    billing = team_key("billing")
    event = billing.post("/api/events/", {"topic": "invoice.paid", "payload": {}, "delay_seconds": 60},
                         format="json").json()
    assert event["messages"] == []
    shipping = team_key("shipping")
    assert shipping.get(f"/api/events/{event['id']}/").status_code == 404
    assert shipping.post(f"/api/events/{event['id']}/cancel/").status_code == 404
    assert billing.get("/api/events/00000000-0000-0000-0000-000000000000/").status_code == 404
    assert billing.get("/api/events/nope/").status_code == 404


def test_an_event_over_the_quota_is_refused_whole_as_a_message_would_be(team_key, endpoints):
    for name in ("a", "b"):
        endpoints("billing", name)
    admin = team_key("billing")
    for name in ("a", "b"):
        subscribe(admin, topic="t", endpoint=name)
    team = team_named("billing")
    team.max_in_flight = 1
    team.save()
    single = admin.post("/api/messages/", {"endpoint": "a", "payload": {}, "delay_seconds": 60}, format="json")
    refused = admin.post("/api/events/", {"topic": "t", "payload": {}, "delay_seconds": 60}, format="json")
    assert refused.status_code == 403 and "quota" in refused.json()["detail"]
    assert single.status_code == 201  # the message fits: the event's two do not
    assert not Event.objects.exists() and ScheduledMessage.objects.count() == 1

"""POST /api/messages/ (and bulk) with ``ordering_key``: shown on the message with waiting_since, a
400 names ordering_key, Celery endpoints refuse it, ``?status=waiting`` lists the waiting ones, and
they count in the endpoint's counts and the team's in-flight quota."""

import pytest

from scheduling.models import ScheduledMessage
from scheduling.teams.quotas import team_in_flight

pytestmark = pytest.mark.django_db


def post(client, endpoint, key, **more):
    return client.post("/api/messages/", {"endpoint": endpoint, "payload": 1, "delay_seconds": 60,
                                          "ordering_key": key, **more}, format="json")


def test_the_key_is_kept_and_shown_in_one_call_and_in_bulk(api, endpoint):
    one = post(api, endpoint, "order-42")
    assert one.status_code == 201, one.content
    assert one.json()["ordering_key"] == "order-42" and one.json()["waiting_since"] is None
    bulk = api.post("/api/messages/bulk/", {"messages": [
        {"endpoint": endpoint, "payload": n, "delay_seconds": 60, "ordering_key": "order-42"} for n in range(2)]},
        format="json")
    assert bulk.status_code == 201, bulk.content
    assert set(ScheduledMessage.objects.values_list("ordering_key", flat=True)) == {"order-42"}
    plain = api.post("/api/messages/", {"endpoint": endpoint, "payload": 1, "delay_seconds": 1}, format="json")
    assert plain.json()["ordering_key"] is None


@pytest.mark.parametrize(("key", "text"), [("k" * 201, "no more than 200"), ("", "may not be blank"),
                                           ("a\x00b", "control character")])
def test_a_bad_key_is_400_naming_the_field_and_stores_nothing(api, endpoint, key, text):
    response = post(api, endpoint, key)
    assert response.status_code == 400
    assert text in " ".join(response.json()["ordering_key"]), response.json()
    assert not ScheduledMessage.objects.exists()


def test_celery_queue_and_celery_task_endpoints_take_a_key(api, platform):
    """A celery_queue endpoint's claim takes the key's turn (celery/turns.py), so the key is stored."""
    for name, handler, target in (("tasks-queue", "celery_queue", ""), ("tasks-run", "celery_task",
                                                                         "testapp.record_receipt")):
        created = api.post("/api/endpoints/", {"name": name, "handler": handler, "handler_target": target},
                           format="json")
        assert created.status_code == 201, created.content
    taken = api.post("/api/messages/", {"endpoint": "tasks-queue", "payload": {"task": "testapp.plain_receipt"},
                                        "delay_seconds": 60, "ordering_key": "k"}, format="json")
    assert taken.status_code == 201, taken.content
    assert ScheduledMessage.objects.get(id=taken.json()["id"]).ordering_key == "k"
    assert post(api, "tasks-run", "k").status_code == 201


def test_waiting_messages_are_listed_counted_and_in_the_quota(api, endpoint):
    ids = [post(api, endpoint, "k").json()["id"] for _ in range(2)]
    team = ScheduledMessage.objects.get(id=ids[0]).endpoint.team
    before = team_in_flight(team=team).messages
    ScheduledMessage.objects.filter(id=ids[1]).update(status="waiting")
    assert team_in_flight(team=team).messages == before  # still counted, now as waiting
    listed = api.get("/api/messages/", {"status": "waiting"}).json()["results"]
    assert [m["id"] for m in listed] == [ids[1]]
    counts = api.get("/api/endpoints/").json()["results"][0]["message_counts"]
    assert counts["waiting"] == 1 and counts["published"] == 1

"""POST /api/messages/ with ``debounce``: shown on the message (and in bulk answers), a 400 names
debounce.<field>, a reschedule keeps a trailing window's cap, and another team's message with the
same key is never touched."""

from datetime import datetime, timedelta

import pytest

from scheduling.models import ScheduledMessage

pytestmark = pytest.mark.django_db
MS = timedelta(milliseconds=1)
TRAILING = {"key": "doc-1", "seconds": 5, "max_seconds": 60, "mode": "trailing"}


def post(client, endpoint, n, debounce=TRAILING):
    return client.post("/api/messages/", {"endpoint": endpoint, "payload": {"n": n}, "delay_seconds": 0,
                                          "debounce": debounce}, format="json")


def test_a_debounced_message_shows_its_window_and_the_one_it_replaced_is_superseded(api, endpoint):
    first = post(api, endpoint, 1)
    assert first.status_code == 201, first.content
    shown = first.json()["debounce"]
    assert {k: shown[k] for k in TRAILING} == TRAILING and shown["until"]
    second = post(api, endpoint, 2)
    assert second.status_code == 201
    assert api.get(f"/api/messages/{first.json()['id']}/").json()["status"] == "superseded"
    assert second.json()["debounce"]["until"] == shown["until"]  # the cap of the window's first
    plain = api.post("/api/messages/", {"endpoint": endpoint, "payload": 1, "delay_seconds": 1}, format="json")
    assert plain.json()["debounce"] is None


@pytest.mark.parametrize(("debounce", "field", "text"), [
    ({"key": "k" * 201, "seconds": 5, "max_seconds": 60}, "debounce.key", "1 to 200 characters"),
    ({"key": "k", "seconds": 0, "max_seconds": 60}, "debounce.seconds", "from 1 to"),
    ({"key": "k", "seconds": 5, "max_seconds": 4}, "debounce.max_seconds", "from seconds to"),
    ({"key": "k", "seconds": 5, "max_seconds": 10 ** 12}, "debounce.max_seconds", "longest delay"),
    ({"key": "k", "seconds": 5}, "debounce.max_seconds", "required for mode trailing"),
    ({"key": "k", "seconds": 5, "mode": "sideways"}, "debounce.mode", "one of trailing, leading"),
    ("k", "debounce", "must be an object"),
])
def test_a_bad_debounce_is_400_naming_the_field_and_stores_nothing(api, endpoint, debounce, field, text):
    response = post(api, endpoint, 1, debounce)
    assert response.status_code == 400
    assert text in " ".join(response.json()[field]), response.json()
    assert not ScheduledMessage.objects.exists()


def test_another_team_s_message_with_the_same_key_is_never_touched(teams):
    mine = post(teams["a"], "billing", 1)
    theirs = post(teams["b"], "billing", 2)
    assert mine.status_code == theirs.status_code == 201
    assert teams["a"].get(f"/api/messages/{mine.json()['id']}/").json()["status"] in ("pending", "published")
    assert teams["b"].get(f"/api/messages/{mine.json()['id']}/").status_code == 404


def test_a_reschedule_of_a_waiting_trailing_message_past_its_cap_is_a_400_naming_the_cap(api, endpoint):
    created = post(api, endpoint, 1).json()
    until = created["debounce"]["until"]
    cap = datetime.fromisoformat(until.replace("Z", "+00:00"))
    late = api.patch(f"/api/messages/{created['id']}/", {"deliver_at": (cap + MS).isoformat()}, format="json")
    assert late.status_code == 400, late.content
    assert until in late.json()["deliver_at"][0] and "debounce.until" in late.json()["deliver_at"][0]
    far = api.patch(f"/api/messages/{created['id']}/", {"delay_seconds": 3600}, format="json")
    assert far.status_code == 400 and "debounce.until" in far.json()["delay_seconds"][0], far.content
    row = ScheduledMessage.objects.get(id=created["id"])
    assert row.due_at == datetime.fromisoformat(created["due_at"].replace("Z", "+00:00"))  # nothing moved
    at_cap = api.patch(f"/api/messages/{created['id']}/", {"deliver_at": until}, format="json")
    assert at_cap.status_code == 200, at_cap.content
    assert at_cap.json()["due_at"] == until and at_cap.json()["debounce"]["until"] == until


def test_a_leading_message_has_no_cap_to_keep_when_rescheduled(api, endpoint):
    created = post(api, endpoint, 1, {"key": "alert", "seconds": 5, "mode": "leading"}).json()
    moved = api.patch(f"/api/messages/{created['id']}/", {"delay_seconds": 3600}, format="json")
    assert moved.status_code == 200, moved.content


def test_bulk_answers_show_debounce_as_single_answers_do(api, endpoint):
    answered = api.post("/api/messages/bulk/", {"messages": [
        {"endpoint": endpoint, "payload": {"n": 1}, "delay_seconds": 0, "debounce": TRAILING},
        {"endpoint": endpoint, "payload": {"n": 2}, "delay_seconds": 1}]}, format="json")
    assert answered.status_code == 201, answered.content
    keyed, plain = answered.json()["messages"]
    assert keyed["debounce"] == api.get(f"/api/messages/{keyed['id']}/").json()["debounce"]
    assert {k: keyed["debounce"][k] for k in TRAILING} == TRAILING and keyed["debounce"]["until"]
    assert plain["debounce"] is None

"""POST /api/messages/ with ``debounce``: shown on the message, a 400 names debounce.<field>, and
another team's message with the same key is never touched."""

import pytest

from scheduling.models import ScheduledMessage

pytestmark = pytest.mark.django_db
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

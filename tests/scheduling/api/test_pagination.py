"""The message list's ``?cursor=`` on the API: a cursor a page wrote leads to the next page; any
other text is a 400 naming the parameter with one reason. It was read as the first page, and one
nested a few thousand deep raised RecursionError inside json.loads: a 500."""

import pytest

from tests.scheduling.core.test_cursors import MALFORMED, encoded

pytestmark = pytest.mark.django_db
LIST = "/api/messages/"


def test_a_cursor_nested_thousands_deep_is_a_400_naming_the_parameter(api):
    response = api.get(LIST, {"cursor": encoded(b"[" * 5000)})
    assert response.status_code == 400, response.content
    assert response.json() == {"cursor": ["is longer than 512 characters; use a page's next or previous link"]}


@pytest.mark.parametrize(("text", "reason"), MALFORMED.values(), ids=MALFORMED.keys())
def test_any_malformed_cursor_is_a_400_with_its_reason(api, text, reason):
    response = api.get(LIST, {"cursor": text})
    assert response.status_code == 400, response.content
    (message,) = response.json()["cursor"]
    assert reason in message and set(response.json()) == {"cursor"}


def test_a_next_link_still_leads_to_the_next_page(api, make_rows):
    make_rows(60)
    first = api.get(LIST).json()
    assert len(first["results"]) == 50 and first["previous"] is None and "cursor=" in first["next"]
    second = api.get(first["next"]).json()
    assert len(second["results"]) == 10 and second["next"] is None
    assert not {m["id"] for m in first["results"]} & {m["id"] for m in second["results"]}
    assert api.get(second["previous"]).json()["results"] == first["results"]
    assert api.get(LIST, {"cursor": ""}).json()["results"] == first["results"]  # an empty one is no cursor

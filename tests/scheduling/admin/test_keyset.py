"""The admin's message list refuses a cursor no page wrote with Django's plain 400 page (no trace):
it was read as the first page, and one nested a few thousand deep was a 500."""

import re

import pytest
from django.urls import reverse

from tests.scheduling.core.test_cursors import MALFORMED, encoded

pytestmark = pytest.mark.django_db
LIST = reverse("admin:scheduling_scheduledmessage_changelist")


def test_a_cursor_nested_thousands_deep_is_a_400(admin_client, caplog):
    response = admin_client.get(LIST, {"cursor": encoded(b"[" * 5000)})
    assert response.status_code == 400
    assert "Bad Request" in response.content.decode() and "Traceback" not in response.content.decode()
    assert "cursor is longer than 512 characters" in caplog.text  # the reason is logged for the operator


@pytest.mark.parametrize("text", [text for text, _ in MALFORMED.values()], ids=MALFORMED.keys())
def test_any_malformed_cursor_is_a_400(admin_client, text):
    assert admin_client.get(LIST, {"cursor": text}).status_code == 400


def test_an_older_link_still_leads_to_the_next_page(admin_client, make_rows):
    make_rows(60)
    page = admin_client.get(LIST, {"cursor": ""}).content.decode()  # an empty cursor is the first page
    older = re.search(r'<a class="dp-older" href="([^"]+)"', page).group(1).replace("&amp;", "&")
    response = admin_client.get(LIST + older)
    assert response.status_code == 200
    assert len(set(re.findall(r"/scheduledmessage/([0-9a-f-]{36})/change/", response.content.decode()))) == 10

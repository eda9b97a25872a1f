"""A message's admin page shows its debounce (key, mode, window) and a superseded status."""

import pytest
from django.urls import reverse

from scheduling.messages.services import message_schedule
from scheduling.models import ScheduledMessage

pytestmark = pytest.mark.django_db


def test_a_message_s_page_shows_its_debounce_and_the_one_it_replaced_superseded(admin_client, endpoint_of):
    endpoint = endpoint_of("v3")
    debounce = {"key": "doc-7", "seconds": 5, "max_seconds": 60}
    first = message_schedule(endpoint=endpoint, payload=1, delay=0, debounce=debounce)
    second = message_schedule(endpoint=endpoint, payload=2, delay=0, debounce=debounce)
    page = admin_client.get(reverse("admin:scheduling_scheduledmessage_change", args=[second.pk])).content.decode()
    assert "key &#x27;doc-7&#x27;: trailing, 5 s after the newest, at most 60 s; window until " in page
    page = admin_client.get(reverse("admin:scheduling_scheduledmessage_change", args=[first.pk])).content.decode()
    assert "dp-status-superseded" in page
    plain = message_schedule(endpoint=endpoint, payload=3, delay=0)
    page = admin_client.get(reverse("admin:scheduling_scheduledmessage_change", args=[plain.pk])).content.decode()
    assert ScheduledMessage.objects.get(pk=first.pk).status == "superseded"
    assert "<label>Debounce:</label>" in page

"""Subscriptions and events in the control room, in real headless Chromium, as a member of team
b: b's subscriptions and events only (a's, on the same topic, are neither listed nor reachable);
an event's page lists its messages, a message's page links back to its event, and the event's
button cancels its waiting messages."""

import pytest

from scheduling.endpoints.services import endpoint_create
from scheduling.events.services import event_publish, subscription_create
from scheduling.models import ScheduledMessage
from scheduling.teams.services import team_create

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fanned(platform, endpoint_queues, staff_member):
    """Teams a and b, each with ledger and mailer subscribed to invoice.#, and an event to
    invoice.paid an hour away; a staff user who is a member of b."""
    made = {}
    for name in ("a", "b"):
        team = team_create(name=name)
        for endpoint in ("ledger", "mailer"):
            endpoint_create(team=team, name=endpoint)
            subscription_create(team=team, topic="invoice.#", endpoint=endpoint,
                                filter={"team": name} if endpoint == "mailer" else None)
        made[name] = event_publish(team=team, topic="invoice.paid", payload={"team": name}, delay=3600)
    staff_member(made["b"].event.team)
    return made


def test_a_member_follows_an_event_to_its_messages_and_cancels_them(browser, fanned):
    a, b = fanned["a"], fanned["b"]
    browser.login("bea", "pw")

    browser.open("/admin/scheduling/subscription/")
    text = browser.text()
    assert text.count("invoice.#") == 2 and '"team": "b"' in text and '"team": "a"' not in text  # b's two only
    browser.screenshot("50-subscriptions")

    browser.open("/admin/scheduling/event/")
    page = browser.driver.page_source
    assert str(b.event.pk) in page and str(a.event.pk) not in page
    browser.click_link(str(b.event.pk))
    rows = browser.find_all(".dp-event-messages tbody tr")
    assert sorted(row.text.split()[1] for row in rows) == ["ledger", "mailer"]
    assert all("published" in row.text or "pending" in row.text for row in rows)
    browser.screenshot("51-event-with-its-messages")

    browser.click_link(str(b.messages[0].pk))
    assert str(b.event.pk) in browser.text()  # the message's page names its event
    browser.click_link(str(b.event.pk))

    browser.submit('button.dp-action-button[value="cancel"]')
    assert "Events cancelled: 1" in browser.messages()
    rows = browser.find_all(".dp-event-messages tbody tr")
    assert [row.text.split()[2] for row in rows] == ["cancelled", "cancelled"]
    browser.screenshot("52-event-cancelled")
    assert set(ScheduledMessage.objects.filter(event=a.event).values_list("status", flat=True)) <= {
        "pending", "published"}  # a's untouched

    browser.open(f"/admin/scheduling/event/{a.event.pk}/change/")  # as if it did not exist
    assert "doesn’t exist" in browser.text()

"""The subscriptions' and events' pages: a team's staff see their team's only (another team's is
not found), an event's page lists its messages linked to theirs, a message's page links its
event; a team admin deletes a subscription (audited through the service), a member cancels an
event's waiting messages with its button, a viewer does neither."""

import pytest
from django.urls import reverse

from scheduling.events.services import event_publish, subscription_create
from scheduling.models import AuditEvent, Endpoint, ScheduledMessage, Subscription, Team

pytestmark = pytest.mark.django_db
SUBSCRIPTIONS = reverse("admin:scheduling_subscription_changelist")
EVENTS = reverse("admin:scheduling_event_changelist")


@pytest.fixture
def fanned(versions):
    """default: two endpoints subscribed to invoice.#, an event to invoice.paid (two messages);
    other: the same, its own."""
    made = {}
    for name in ("default", "other"):
        team = Team.objects.get_or_create(name=name)[0]
        for endpoint in ("ledger", "mailer"):
            Endpoint.objects.create(team=team, name=endpoint, queue=f"{name}--{endpoint}", topology=versions["v3"])
        subscription = subscription_create(team=team, topic="invoice.#", endpoint="ledger")
        subscription_create(team=team, topic="invoice.paid", endpoint="mailer", filter={"amount": [10]})
        published = event_publish(team=team, topic="invoice.paid", payload={"amount": 10, "team": name}, delay=3600)
        made[name] = (subscription, published)
    return made


def test_staff_see_their_team_s_subscriptions_and_events_only(staff_client, fanned):
    client = staff_client("viewer")
    mine, theirs = fanned["default"], fanned["other"]
    page = client.get(SUBSCRIPTIONS).content.decode()
    assert page.count("invoice.#") == 1 and "every event" in page
    assert client.get(reverse("admin:scheduling_subscription_change", args=[mine[0].pk])).status_code == 200
    assert client.get(reverse("admin:scheduling_subscription_change", args=[theirs[0].pk])).status_code == 302
    events = client.get(EVENTS).content.decode()
    assert reverse("admin:scheduling_event_change", args=[mine[1].event.pk]) in events
    assert reverse("admin:scheduling_event_change", args=[theirs[1].event.pk]) not in events
    assert client.get(reverse("admin:scheduling_event_change", args=[theirs[1].event.pk])).status_code == 302


def test_an_event_page_lists_its_messages_and_a_message_links_its_event(staff_client, fanned):
    client = staff_client("viewer")
    published = fanned["default"][1]
    page = client.get(reverse("admin:scheduling_event_change", args=[published.event.pk])).content.decode()
    for message in published.messages:
        assert reverse("admin:scheduling_scheduledmessage_change", args=[message.pk]) in page
    assert "ledger" in page and "mailer" in page and "dp-event-messages" in page
    message = client.get(reverse("admin:scheduling_scheduledmessage_change", args=[published.messages[0].pk]))
    assert reverse("admin:scheduling_event_change", args=[published.event.pk]) in message.content.decode()


def test_a_member_cancels_an_event_s_waiting_messages_and_a_viewer_may_not(staff_client, fanned):
    published = fanned["default"][1]
    action = reverse("admin:scheduling_event_action", args=[published.event.pk, "cancel"])
    assert staff_client("viewer").post(action).status_code == 403
    assert set(ScheduledMessage.objects.filter(event=published.event).values_list("status", flat=True)) == {"published"}
    answer = staff_client("member").post(action)
    assert answer.status_code == 302
    assert set(ScheduledMessage.objects.filter(event=published.event).values_list("status", flat=True)) == {"cancelled"}
    theirs = fanned["other"][1]
    assert set(ScheduledMessage.objects.filter(event=theirs.event).values_list("status", flat=True)) == {"published"}


def test_a_team_admin_deletes_a_subscription_audited_and_a_member_may_not(staff_client, fanned):
    subscription = fanned["default"][0]
    delete = reverse("admin:scheduling_subscription_delete", args=[subscription.pk])
    assert staff_client("member").post(delete, {"post": "yes"}).status_code == 403
    assert staff_client("admin").post(delete, {"post": "yes"}).status_code == 302
    assert not Subscription.objects.filter(pk=subscription.pk).exists()
    assert AuditEvent.objects.filter(action="subscription.delete", object_id=str(subscription.pk)).exists()
    assert staff_client("admin").post(reverse("admin:scheduling_subscription_delete",
                                              args=[fanned["other"][0].pk]), {"post": "yes"}).status_code == 302
    assert Subscription.objects.filter(pk=fanned["other"][0].pk).exists()  # not found for them: untouched

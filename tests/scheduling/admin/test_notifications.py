"""The notification routes' page (team-scoped: a team's staff see their team's routes, its admins
delete them, audited; viewers only read) and a message's page showing its callbacks and, for a
notification message, its type."""

import uuid

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling.audit import actions
from scheduling.models import AuditEvent, Endpoint, NotificationRoute, ScheduledMessage, Team

pytestmark = pytest.mark.django_db
LIST = reverse("admin:scheduling_notificationroute_changelist")


@pytest.fixture
def routes(versions):
    made = {}
    for key, name in (("mine", "default"), ("other", f"other-{uuid.uuid4().hex[:6]}")):
        team = Team.objects.get_or_create(name=name)[0]
        endpoint = Endpoint.objects.create(team=team, name=f"ops-{key}", queue=f"{team.name}--ops-{key}",
                                           topology=versions["v3"])
        made[key] = NotificationRoute.objects.create(team=team, endpoint=endpoint,
                                                     events=["message.failed", "quota.warning"])
    return made


def test_a_team_s_viewers_read_their_routes_only(staff_client, routes):
    client = staff_client("viewer")
    page = client.get(LIST).content.decode()
    assert "ops-mine" in page and "message.failed, quota.warning" in page and "ops-other" not in page
    assert client.get(reverse("admin:scheduling_notificationroute_change", args=[routes["other"].pk])).status_code \
        == 302  # not found, as Django says it
    assert client.post(reverse("admin:scheduling_notificationroute_delete", args=[routes["mine"].pk]),
                       {"post": "yes"}).status_code == 403
    assert NotificationRoute.objects.count() == 2


def test_a_team_s_admin_deletes_its_route_audited(staff_client, routes):
    client = staff_client("admin")
    done = client.post(reverse("admin:scheduling_notificationroute_delete", args=[routes["mine"].pk]),
                       {"post": "yes"})
    assert done.status_code == 302
    assert list(NotificationRoute.objects.values_list("pk", flat=True)) == [routes["other"].pk]
    (audited,) = AuditEvent.objects.filter(action=actions.NOTIFICATION_ROUTE_DELETE)
    assert audited.source == "admin" and audited.before["endpoint"] == "ops-mine"


def test_a_message_s_page_shows_its_callbacks_and_a_notification_its_type(admin_client, routes):
    ops = routes["mine"].endpoint
    now = timezone.now()
    common = dict(endpoint=ops, topology=ops.topology, payload={"n": 1}, due_at=now, requested_delay_ms=0,
                  status=ScheduledMessage.Status.PUBLISHED, created_at=now)
    told = ScheduledMessage.objects.create(on_delivered=ops, on_failed=routes["mine"].endpoint, **common)
    page = admin_client.get(reverse("admin:scheduling_scheduledmessage_change", args=[told.pk])).content.decode()
    assert "on delivered: ops-mine; on failed: ops-mine" in page and "not a notification" in page
    note = ScheduledMessage.objects.create(notification="endpoint.disabled", **common)
    page = admin_client.get(reverse("admin:scheduling_scheduledmessage_change", args=[note.pk])).content.decode()
    assert "endpoint.disabled" in page

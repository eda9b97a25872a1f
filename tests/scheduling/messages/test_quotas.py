"""The team's in-flight quota on every path that puts a message back in flight: republish, resend,
a bulk republish (what fits is republished, the rest counted as refused in the action) and the
admin's actions (a message per refused row). The check itself: tests/scheduling/teams/test_quotas.py."""

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.utils import timezone

from scheduling.core.errors import QuotaExceeded
from scheduling.messages.bulk import message_apply_matching, message_bulk_matching, message_start_matching
from scheduling.messages.services import message_republish, message_resend
from scheduling.models import BulkAction, Endpoint, ScheduledMessage, Team
from scheduling.teams.services import team_update

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status
FULL = "team default has 2 messages in flight of its quota of 2"


@pytest.fixture
def team():
    return Team.objects.get_or_create(name="default")[0]


@pytest.fixture
def endpoint(team, versions):
    return Endpoint.objects.create(team=team, name="e", queue="default--e", topology=versions["v3"])


def rows(endpoint, n, status):
    now = timezone.now()
    return ScheduledMessage.objects.bulk_create([
        ScheduledMessage(endpoint=endpoint, topology=endpoint.topology, payload={"n": i},
                         due_at=now - timedelta(minutes=1), requested_delay_ms=0, status=status,
                         finished_at=None if status in ("pending", "published") else now)
        for i in range(n)])


def status_of(message):
    message.refresh_from_db()
    return message.status


@pytest.fixture
def full(team, endpoint):
    """The team at its quota of 2: two messages pending."""
    team_update(team=team, max_in_flight=2)
    return rows(endpoint, 2, Status.PENDING)


def test_republish_at_the_quota_is_refused(full, endpoint):
    (failed,) = rows(endpoint, 1, Status.FAILED)
    with pytest.raises(QuotaExceeded, match=FULL):
        message_republish(message_id=failed.pk)
    assert status_of(failed) == Status.FAILED


def test_resend_at_the_quota_is_refused(full, endpoint):
    (delivered,) = rows(endpoint, 1, Status.DELIVERED)
    with pytest.raises(QuotaExceeded, match=FULL):
        message_resend(message_id=delivered.pk)
    assert status_of(delivered) == Status.DELIVERED


def test_a_bulk_republish_republishes_what_fits_and_counts_the_rest(team, endpoint):
    team_update(team=team, max_in_flight=3)
    rows(endpoint, 1, Status.PENDING)
    failed = rows(endpoint, 5, Status.FAILED)
    action = message_apply_matching(action=message_start_matching(kind=BulkAction.Kind.REPUBLISH,
                                                                  filters={"status": "failed"}, team=team))
    action.refresh_from_db()
    assert (action.state, action.matched, action.done, action.refused) == (BulkAction.State.DONE, 5, 2, 3)
    assert "team default has 3 messages in flight of its quota of 3" in action.error
    assert sorted(status_of(m) for m in failed) == ["failed"] * 3 + ["pending"] * 2
    with pytest.raises(QuotaExceeded, match="bulk republish: 0 message.s. done, 3 refused"):
        message_bulk_matching(kind=BulkAction.Kind.REPUBLISH, filters={"status": "failed"}, team=team)


def test_the_admin_s_actions_say_which_rows_the_quota_refused(full, endpoint, admin_client):
    team_update(team=Team.objects.get(name="default"), max_in_flight=3)
    failed = rows(endpoint, 2, Status.FAILED)
    response = admin_client.post("/admin/scheduling/scheduledmessage/", {
        "action": "republish", "_selected_action": [str(m.pk) for m in failed]}, follow=True)
    said = [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]
    assert ("success", "Republished: 1") in said
    refusals = [text for level, text in said if level == "error"]
    assert len(refusals) == 1 and refusals[0].startswith("team default has 3 messages in flight of its quota of 3")
    assert sorted(status_of(m) for m in failed) == ["failed", "pending"]
    (delivered,) = rows(endpoint, 1, Status.DELIVERED)
    response = admin_client.post("/admin/scheduling/scheduledmessage/", {
        "action": "resend", "_selected_action": [str(delivered.pk)]}, follow=True)
    assert [m.message for m in get_messages(response.wsgi_request)][0].startswith(
        "team default has 3 messages in flight of its quota of 3")
    assert status_of(delivered) == Status.DELIVERED

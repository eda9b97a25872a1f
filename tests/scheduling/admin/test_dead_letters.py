"""The admin's dead letters (issue 49): failed and expired messages, told apart by a status filter;
"Republish selected" sends failed ones again and leaves the expired, which are never retried."""

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling.models import ScheduledMessage

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status
URL = "admin:scheduling_failedmessage_changelist"


@pytest.fixture
def dead(make_rows):
    now = timezone.now()
    (failed,) = make_rows(1, status=Status.FAILED, finished_at=now, last_error="handler attempt 6: 500")
    (expired,) = make_rows(1, status=Status.EXPIRED, finished_at=now, expires_at=now, last_error="expired at ...")
    (delivered,) = make_rows(1, status=Status.DELIVERED, finished_at=now)
    return failed, expired, delivered


def link(message) -> str:
    return reverse("admin:scheduling_scheduledmessage_change", args=[message.pk])


def test_failed_and_expired_are_listed_and_filtered_apart(staff_client, dead):
    failed, expired, delivered = dead
    client = staff_client("admin")
    page = client.get(reverse(URL)).content.decode()
    assert link(failed) in page and link(expired) in page and link(delivered) not in page
    only = client.get(reverse(URL), {"dead_status": "expired"}).content.decode()
    assert link(expired) in only and link(failed) not in only


def test_republish_selected_leaves_an_expired_message_expired(staff_client, dead):
    failed, expired, _ = dead
    client = staff_client("admin")
    client.post(reverse(URL), {"action": "republish_selected", "_selected_action": [failed.pk, expired.pk]})
    failed.refresh_from_db()
    expired.refresh_from_db()
    assert failed.status == Status.PENDING and expired.status == Status.EXPIRED

"""Ordering in the admin (issue 49): a waiting message's page links the message it waits for (and says
so when nothing is left before it), a viewer sees it; with DELAY_ORDERING_KEYS off the schedule form
refuses overlap skip/buffer_one on its field, naming the setting."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling.models import Schedule, ScheduledMessage

Status = ScheduledMessage.Status
pytestmark = pytest.mark.django_db


def page(client, message) -> str:
    response = client.get(reverse("admin:scheduling_scheduledmessage_change", args=[message.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_waiting_messages_page_links_what_it_waits_for(admin_client, readonly_client, make_rows):
    now = timezone.now()
    (head,) = make_rows(1, ordering_key="k", status=Status.PUBLISHED, due_at=now - timedelta(seconds=3))
    (waiting,) = make_rows(1, ordering_key="k", status=Status.WAITING, due_at=now - timedelta(seconds=1),
                           waiting_since=now)
    link = f'<a href="{reverse("admin:scheduling_scheduledmessage_change", args=[head.pk])}">{head.pk}</a>'
    for client in (admin_client, readonly_client):
        shown = page(client, waiting)
        assert "Waiting for" in shown and link in shown
    assert "not waiting" in page(admin_client, head)
    ScheduledMessage.objects.filter(pk=head.pk).update(status=Status.DELIVERED)  # ended; its wake on its way
    assert "its turn has come" in page(admin_client, waiting)


@pytest.mark.parametrize("overlap", ["skip", "buffer_one"])
def test_off_the_schedule_form_refuses_overlap_on_its_field(admin_client, endpoint_row, settings, overlap):
    settings.DELAY_ORDERING_KEYS = False
    response = admin_client.post(reverse("admin:scheduling_schedule_add"), {
        "key": "poll", "endpoint": endpoint_row.pk, "payload": "{}", "cron": "", "timezone": "UTC",
        "interval_seconds": "7", "missed_runs": "skip", "jitter_seconds": "", "catchup_seconds": "",
        "overlap": overlap})
    assert response.status_code == 200 and not Schedule.objects.exists()
    errors = response.context["adminform"].form.errors
    assert "DELAY_ORDERING_KEYS" in errors["overlap"][0], errors

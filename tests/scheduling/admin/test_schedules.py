"""The schedules' admin pages: the form takes jitter and catch-up (through the upsert service,
audited like the API's changes), the list and the detail show them and the runs a downtime missed."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling.models import AuditEvent, Schedule
from scheduling.schedules.services import schedule_create_runs

pytestmark = pytest.mark.django_db
ADD = reverse("admin:scheduling_schedule_add")
LIST = reverse("admin:scheduling_schedule_changelist")


def form(endpoint, **changes):
    return {"key": "poll", "endpoint": endpoint.pk, "payload": "{}", "cron": "", "timezone": "UTC",
            "interval_seconds": "7", "missed_runs": "skip", "jitter_seconds": "", "catchup_seconds": "",
            "overlap": "allow", **changes}


def test_the_form_sets_jitter_and_catch_up_and_the_pages_show_the_missed_runs(admin_client, endpoint_row):
    added = admin_client.post(ADD, form(endpoint_row, jitter_seconds="2", catchup_seconds="60"))
    assert added.status_code == 302, added.content.decode()[-3000:]
    schedule = Schedule.objects.get(key="poll")
    assert (schedule.jitter_ms, schedule.catchup_ms) == (2000, 60_000)
    change = reverse("admin:scheduling_schedule_change", args=[schedule.pk])
    page = admin_client.get(change).content.decode()
    assert 'name="jitter_seconds" value="2' in page and 'name="catchup_seconds" value="60' in page
    changed = admin_client.post(change, form(endpoint_row, jitter_seconds="3", catchup_seconds="60"))
    assert changed.status_code == 302
    event = AuditEvent.objects.filter(action="schedule.update").latest("id")
    assert (event.before["jitter_ms"], event.after["jitter_ms"]) == (2000, 3000)
    # a downtime of 10 minutes: the runs older than the catch-up window are counted and shown
    now = timezone.now()
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=now - timedelta(minutes=10),
                                                   anchor_at=now - timedelta(minutes=10))
    missed = schedule_create_runs(now=now).skipped
    assert missed > 70 and Schedule.objects.get(pk=schedule.pk).runs_missed == missed
    listed = admin_client.get(LIST).content.decode()
    assert f'<td class="field-runs_missed">{missed}</td>' in listed


def test_a_jitter_above_the_interval_is_refused_on_its_field(admin_client, endpoint_row):
    response = admin_client.post(ADD, form(endpoint_row, jitter_seconds="7"))
    assert response.status_code == 200 and not Schedule.objects.exists()
    assert "must be below interval_seconds (7 s)" in response.content.decode()


def test_a_viewer_sees_the_policies_and_the_next_runs_due_time(readonly_client, endpoint_of):
    from scheduling.schedules.services import schedule_upsert

    schedule, _ = schedule_upsert(key="poll", endpoint=endpoint_of("v3").name, payload={}, interval_seconds=7,
                                  jitter_seconds=3, catchup_seconds=60)
    page = readonly_client.get(reverse("admin:scheduling_schedule_change", args=[schedule.pk])).content.decode()
    run = schedule.upcoming(timezone.now())[0]
    due = schedule.run_due_at(run)
    assert f"{due:%Y-%m-%d %H:%M:%S.%f}"[:-3] in page
    for label in ("Jitter seconds", "Catchup seconds", "Runs missed", "Next run due (UTC)"):
        assert label in page, label


def test_the_form_sets_overlap_and_the_pages_show_it_and_its_skipped_runs(admin_client, endpoint_row):
    assert admin_client.post(ADD, form(endpoint_row, overlap="skip")).status_code == 302
    schedule = Schedule.objects.get(key="poll")
    assert schedule.overlap == "skip"
    change = reverse("admin:scheduling_schedule_change", args=[schedule.pk])
    assert '<option value="skip" selected>' in admin_client.get(change).content.decode()
    assert admin_client.post(change, form(endpoint_row, overlap="buffer_one")).status_code == 302
    event = AuditEvent.objects.filter(action="schedule.update").latest("id")
    assert (event.before["overlap"], event.after["overlap"]) == ("skip", "buffer_one")
    Schedule.objects.filter(pk=schedule.pk).update(runs_overlap_skipped=4)
    listed = admin_client.get(LIST).content.decode()
    assert '<td class="field-overlap">buffer_one</td>' in listed
    assert '<td class="field-runs_overlap_skipped">4</td>' in listed
    assert admin_client.post(ADD, form(endpoint_row, key="other", overlap="often")).status_code == 200

"""messages/bulk.py on the real database: a cancel or republish by filters changes
exactly the matching set, batch by batch (its progress counted), its dry run counts that set, and
bad filters are field errors that change nothing."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from scheduling.messages.bulk import (
    message_apply_matching,
    message_bulk_matching,
    message_count_matching,
    message_start_matching,
)
from scheduling.models import BulkAction, Endpoint, ScheduledMessage

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status
H = timedelta(hours=1)


@pytest.fixture
def rows(versions, endpoint_name):
    """Two endpoints x due in 1 h / 3 h / 30 h x pending, published, delivered, failed, cancelled."""
    now = timezone.now()
    made = []
    for suffix in ("a", "b"):
        endpoint = Endpoint.objects.create(name=f"{endpoint_name}-{suffix}", queue=f"{endpoint_name}-{suffix}", topology=versions["v3"])
        for hours in (1, 3, 30):
            for status in Status:
                made.append(ScheduledMessage.objects.create(
                    endpoint=endpoint, topology=versions["v3"], payload={"h": hours}, due_at=now + hours * H,
                    requested_delay_ms=0, status=status, schedule="nightly" if hours == 30 else None))
    return made


def test_cancel_by_filter_cancels_exactly_the_matching_set_and_the_dry_run_counts_it(rows, endpoint_name, settings):
    settings.DELAY_PUBLISH_BATCH = 1  # a batch per message: the walk by id must not skip or repeat one
    filters = {"endpoint": f"{endpoint_name}-a", "due_before": timezone.now() + 5 * H}
    expected = {r.id for r in rows if r.endpoint.name.endswith("-a") and r.due_at < filters["due_before"]
                and r.status in (Status.PENDING, Status.PUBLISHED, Status.WAITING)}  # waiting: for its key's turn
    before = {r.id: r.status for r in ScheduledMessage.objects.all()}
    assert message_bulk_matching(kind="cancel", filters=filters, dry_run=True) == len(expected) == 6
    assert {r.id: r.status for r in ScheduledMessage.objects.all()} == before  # the dry run changed nothing
    assert message_bulk_matching(kind="cancel", filters=filters) == 6
    after = {r.id: r.status for r in ScheduledMessage.objects.all()}
    assert {i for i, s in after.items() if s != before[i]} == expected
    assert {after[i] for i in expected} == {Status.CANCELLED}
    action = BulkAction.objects.get()
    assert (action.kind, action.matched, action.done, action.state) == ("cancel", 6, 6, "done")
    assert action.filters["endpoint"] == f"{endpoint_name}-a"


def test_republish_by_schedule_puts_its_failed_runs_back(rows):
    assert message_count_matching(kind="republish", filters={"schedule": "nightly"}) == 2
    assert message_bulk_matching(kind="republish", filters={"schedule": "nightly", "status": "failed"}) == 2
    assert not ScheduledMessage.objects.filter(schedule="nightly", status=Status.FAILED).exists()
    assert ScheduledMessage.objects.filter(schedule="nightly", status=Status.PENDING).count() == 4  # 2 were pending
    # the republished runs' next attempt is a bulk action's; the two that were pending keep theirs
    assert sorted(ScheduledMessage.objects.filter(schedule="nightly", status=Status.PENDING)
                  .values_list("trigger", flat=True)) == ["bulk", "bulk", "scheduled", "scheduled"]


def test_a_recorded_action_counts_its_progress_and_stops_where_it_failed(rows, settings, monkeypatch):
    settings.DELAY_PUBLISH_BATCH = 2
    action = message_start_matching(kind="cancel", filters={"status": "published"}, requested_by="ops")
    assert action.matched == 6 and action.done == 0 and action.state == "running"
    calls = []

    def fail_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("database went away")
        return original(*args, **kwargs)

    original = message_apply_matching.__globals__["_apply_batch"]
    monkeypatch.setattr("scheduling.messages.bulk._apply_batch", fail_third)
    done = message_apply_matching(action=action)
    assert (done.state, done.done) == ("failed", 4) and "database went away" in done.error
    assert ScheduledMessage.objects.filter(status=Status.PUBLISHED).count() == 2  # the rest untouched


@pytest.mark.parametrize(("kind", "filters", "field", "text"), [
    ("cancel", {}, "non_field_errors", "at least one filter"),
    ("cancel", {"dry_run": True}, "non_field_errors", "at least one filter"),
    ("cancel", {"status": "delivered"}, "status", "pending or published"),
    ("republish", {"status": "pending"}, "status", "failed messages only"),
    ("cancel", {"endpoint": "nope"}, "endpoint", "unknown endpoint"),
    ("cancel", {"due_before": timezone.now().replace(tzinfo=None)}, "due_before", "timezone"),
])
def test_bad_filters_are_field_errors_and_change_nothing(rows, kind, filters, field, text):
    before = {r.id: r.status for r in ScheduledMessage.objects.all()}
    with pytest.raises(ValidationError) as caught:
        message_bulk_matching(kind=kind, filters=filters)
    assert text in caught.value.message_dict[field][0]
    assert {r.id: r.status for r in ScheduledMessage.objects.all()} == before and not BulkAction.objects.exists()

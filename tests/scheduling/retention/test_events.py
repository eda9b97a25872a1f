"""The prune deletes the events older than the messages' longest retention with no message left
(their messages pruned before them, in the same run), in batches of DELAY_PRUNE_BATCH; an old event
whose message stays (in flight, or failed within DELAY_FAILED_RETENTION) stays; a dry run counts;
the command says how many went, with its progress bar."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Event, ScheduledMessage, Team
from scheduling.retention.services import message_prune

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


@pytest.fixture
def aged(settings, tmp_path, endpoint_row):
    """Five old events without messages, one old event whose delivered message is old too (both go),
    one old event with a message in flight, one with a failed message within its retention, two young
    events: retention 7 days, failed 30, batches of 2."""
    settings.ACCURACY_REPORT_DIR = tmp_path
    settings.DELAY_RETENTION = timedelta(days=7)
    settings.DELAY_FAILED_RETENTION = timedelta(days=30)
    settings.DELAY_PRUNE_BATCH = 2
    now = timezone.now()
    team = Team.objects.get(pk=endpoint_row.team_id)

    def event(age, label):
        made = Event.objects.create(team=team, topic=label, payload={}, due_at=now - age)
        Event.objects.filter(pk=made.pk).update(created_at=now - age)
        return made

    def message(event, status, age):
        return ScheduledMessage.objects.create(
            endpoint=endpoint_row, topology=endpoint_row.topology, payload={}, due_at=now - age,
            requested_delay_ms=0, status=status, event=event, created_at=now - age,
            finished_at=now - age if status != Status.PUBLISHED else None,
            delivered_at=now - age if status == Status.DELIVERED else None)

    gone = [event(timedelta(days=31 + n), f"gone{n}") for n in range(5)]
    delivered = event(timedelta(days=40), "delivered")
    message(delivered, Status.DELIVERED, timedelta(days=40))
    in_flight = event(timedelta(days=40), "in_flight")
    message(in_flight, Status.PUBLISHED, timedelta(days=40))
    failed = event(timedelta(days=40), "failed")
    message(failed, Status.FAILED, timedelta(days=20))  # finished 20 days ago: 10 more days
    young = [event(timedelta(days=3), "young"), event(timedelta(0), "new")]
    return now, {"gone": gone + [delivered], "stay": [in_flight, failed, *young]}


def test_the_prune_deletes_the_events_left_without_messages(aged, caplog):
    now, events = aged
    with caplog.at_level("INFO", "scheduling.retention.table_prunes"):
        result = message_prune(now=now)
    assert result.deleted == 1  # the delivered message first, then its event
    assert result.events_deleted == 6
    assert set(Event.objects.values_list("topic", flat=True)) == {e.topic for e in events["stay"]}
    batches = [r.getMessage() for r in caplog.records if "events with no message" in r.getMessage()]
    assert [line.split()[1] for line in batches] == ["2", "2", "2"]
    assert message_prune(now=now).events_deleted == 0


def test_a_dry_run_counts_and_deletes_nothing(aged):
    now, events = aged
    result = message_prune(now=now, dry_run=True)
    assert (result.event_candidates, result.events_deleted) == (5, 0)  # the delivered one's message is still there
    assert Event.objects.count() == 10


def test_the_command_says_how_many_went(aged, prune_command_says):
    prune_command_says(dry_run="dry run (events, no message left, older than 30d): 5 would be deleted",
                       counted=["events", "6"], progress="pruning events")
    assert Event.objects.count() == 4

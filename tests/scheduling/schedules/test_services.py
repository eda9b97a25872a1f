"""schedules/services.py on the real database: the upsert and its revisions, pause, delete, the
materialiser (its window, the next run whatever its distance, missed runs, two at once), and
field errors that store nothing. Messages are rows here; the e2e tests deliver them."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from harness.at_once import at_once
from scheduling.core.errors import NotFound
from scheduling.models import Endpoint, Schedule, ScheduledMessage
from scheduling.schedules.services import (
    schedule_create_runs,
    schedule_delete,
    schedule_run_key,
    schedule_set_paused,
    schedule_upsert,
)
from tests.scheduling.schedules.conftest import runs, upsert

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status
S = timedelta(seconds=1)


def test_an_interval_schedule_gets_its_runs_of_the_next_minute_at_once(endpoint):
    before = timezone.now()
    schedule, created = upsert(endpoint, interval_seconds="7")
    assert created and schedule.revision == 1 and schedule.anchor_at >= before + 7 * S
    made = runs("poll")
    assert [m.due_at for m in made] == [schedule.anchor_at + k * 7 * S for k in range(8)]  # to 56 s: the window is 60
    assert {m.idempotency_key for m in made} == {schedule_run_key(schedule=schedule, run_at=m.due_at) for m in made}
    assert all(m.payload == {"job": "poll"} and m.endpoint_id == endpoint.pk for m in made)
    assert schedule.next_run_at == made[-1].due_at + 7 * S and schedule.last_run_at == made[-1].due_at


def test_a_daily_schedule_has_its_next_run_in_the_cascade_a_day_ahead(endpoint):
    schedule, _ = upsert(endpoint, cron="0 3 * * *", timezone_name="Europe/Berlin")
    (run,) = runs("poll")
    assert run.due_at > timezone.now() and run.due_at - timezone.now() <= timedelta(days=1)
    assert run.due_at.astimezone(schedule.rule.tz and __import__("zoneinfo").ZoneInfo("Europe/Berlin")).hour == 3
    assert schedule_create_runs().runs == 0  # nothing new until its next run comes within the window
    assert len(runs("poll")) == 1


def test_the_materialiser_extends_the_window_and_never_makes_a_run_twice(endpoint):
    schedule, _ = upsert(endpoint)
    first = {m.due_at for m in runs("poll")}
    later = schedule.anchor_at - 7 * S + 33 * S  # the window now ends at 93 s: runs at 63, 70, 77, 84 and 91 s
    made = schedule_create_runs(now=later)
    assert made.runs == 5 and made.schedules == 1
    again = schedule_create_runs(now=later)
    assert again.runs == 0
    due = [m.due_at for m in runs("poll")]
    assert len(due) == len(set(due)) == 13 and first < set(due)


def test_posting_the_same_schedule_again_changes_nothing(endpoint):
    schedule, _ = upsert(endpoint)
    before = [(m.id, m.status) for m in runs("poll")]
    again, created = upsert(endpoint)
    assert not created and again.revision == 1 and again.anchor_at == schedule.anchor_at
    assert [(m.id, m.status) for m in runs("poll")] == before


def test_a_changed_payload_is_a_new_revision_whose_runs_replace_the_old_ones(endpoint):
    schedule, _ = upsert(endpoint)
    old = runs("poll")
    changed, created = upsert(endpoint, payload={"job": "v2"})
    assert not created and changed.revision == 2
    assert changed.anchor_at == schedule.anchor_at  # same rule: the runs keep their times
    assert {m.status for m in runs("poll", id__in=[m.id for m in old])} == {Status.CANCELLED}
    new = runs("poll", status=Status.PUBLISHED)
    assert [m.due_at for m in new] == [m.due_at for m in old]
    assert {m.payload["job"] for m in new} == {"v2"} and all(":2:" in m.idempotency_key for m in new)


def test_a_changed_rule_reanchors_the_schedule(endpoint):
    upsert(endpoint)
    changed, _ = upsert(endpoint, interval_seconds=None, cron="*/15 * * * *")
    live = runs("poll", status=Status.PUBLISHED)
    assert changed.anchor_at is None and len(live) == 1 and live[0].due_at.minute % 15 == 0
    assert live[0].due_at.second == 0


@pytest.mark.parametrize(("kwargs", "field", "text"), [
    ({"cron": "61 * * * *", "interval_seconds": None}, "cron", "bad minute"),
    ({"cron": "* * * *", "interval_seconds": None}, "cron", "has 4 fields"),
    ({"cron": "0 * * * *", "interval_seconds": 5}, "cron", "exactly one of cron or interval_seconds"),
    ({"cron": "", "interval_seconds": None}, "cron", "exactly one of cron or interval_seconds"),
    ({"interval_seconds": "0.5"}, "interval_seconds", "at least 1 s"),
    ({"interval_seconds": "nan"}, "interval_seconds", "finite"),
    ({"timezone_name": "Mars/Base"}, "timezone", "unknown timezone"),
    ({"key": "has space"}, "key", "letters, digits"),
    ({"key": "k" * 201}, "key", "at most 200"),
    ({"endpoint": "nope"}, "endpoint", "unknown endpoint"),
    ({"payload": None}, "payload", "required"),
    ({"payload": {"a": "\x00"}}, "payload", "NUL"),
    ({"missed_runs": "all"}, "missed_runs", "one of skip, latest"),
    ({"start_at": timezone.now(), "end_at": timezone.now() - S}, "end_at", "after start_at"),
    ({"start_at": timezone.now().replace(tzinfo=None)}, "start_at", "with a timezone"),
])
def test_bad_input_names_the_field_and_stores_nothing(endpoint, kwargs, field, text):
    kwargs = {"key": "bad", "endpoint": endpoint.name, "payload": {}, "interval_seconds": 10, **kwargs}
    with pytest.raises(ValidationError) as caught:
        schedule_upsert(**kwargs)
    assert text in caught.value.message_dict[field][0]
    assert not Schedule.objects.exists() and not ScheduledMessage.objects.exists()


def test_pause_cancels_the_runs_made_and_resume_starts_again_from_now(endpoint):
    upsert(endpoint)
    paused = schedule_set_paused(key="poll", paused=True)
    assert paused.is_paused and {m.status for m in runs("poll")} == {Status.CANCELLED}
    assert schedule_create_runs(now=timezone.now() + 120 * S).runs == 0
    resumed = schedule_set_paused(key="poll", paused=False)
    live = runs("poll", status=Status.PUBLISHED)
    assert not resumed.is_paused and len(live) == 8 and live[0].due_at > timezone.now()
    assert resumed.revision == 2 and all(":2:" in m.idempotency_key for m in live)
    with pytest.raises(NotFound):
        schedule_set_paused(key="nope", paused=True)


def test_delete_cancels_the_runs_to_come_and_keeps_the_history(endpoint):
    upsert(endpoint)
    done = runs("poll")[0]
    ScheduledMessage.objects.filter(pk=done.pk).update(status=Status.DELIVERED, delivered_at=timezone.now())
    assert schedule_delete(key="poll") == 7
    assert not Schedule.objects.exists()
    assert [m.status for m in runs("poll")] == [Status.DELIVERED, *[Status.CANCELLED] * 7]


def _reset(schedule, first_run_in, now=None):
    """As if none of its runs were made: its first run ``first_run_in`` from ``now`` (in the past:
    as if beat had been down since then)."""
    ScheduledMessage.objects.filter(schedule=schedule.key).delete()
    first = (now or timezone.now()) + first_run_in
    Schedule.objects.filter(pk=schedule.pk).update(anchor_at=first, next_run_at=first, last_run_at=None)


def test_runs_missed_during_a_downtime_are_skipped_by_default(endpoint):
    schedule, _ = upsert(endpoint)
    _reset(schedule, -timedelta(minutes=10))
    made = schedule_create_runs()
    assert made.skipped == 86 and made.runs == 9  # 10 min of runs every 7 s; then the next minute's (2 s to 58 s)
    assert all(m.due_at > timezone.now() - S for m in runs("poll"))


def test_the_latest_policy_makes_the_latest_missed_run_once(endpoint):
    schedule, _ = upsert(endpoint, missed_runs="latest")
    _reset(schedule, -timedelta(minutes=10))
    now = timezone.now()
    made = schedule_create_runs(now=now)
    assert made.skipped == 85 and made.runs == 1 + 9
    past = [m for m in runs("poll") if m.due_at <= now]
    assert len(past) == 1 and now - past[0].due_at < 7 * S
    assert schedule_create_runs(now=now).runs == 0


def test_end_at_stops_the_runs(endpoint):
    start = (timezone.now() + 5 * S).replace(microsecond=0)
    schedule, _ = upsert(endpoint, start_at=start, end_at=start + 21 * S)
    assert [m.due_at for m in runs("poll")] == [start, start + 7 * S, start + 14 * S, start + 21 * S]
    assert schedule.next_run_at is None


def test_an_inactive_endpoint_gets_no_runs_until_it_is_active_again(endpoint):
    schedule, _ = upsert(endpoint)
    Endpoint.objects.filter(pk=endpoint.pk).update(is_active=False)
    _reset(schedule, 2 * S)
    assert schedule_create_runs().runs == 0 and not runs("poll")
    Endpoint.objects.filter(pk=endpoint.pk).update(is_active=True)
    assert schedule_create_runs().runs == 9


@pytest.mark.django_db(transaction=True)
def test_two_materialisers_at_once_make_each_run_once(endpoint):
    """Two beats, say: two threads (two database connections) run the materialiser at the same
    moment over 20 schedules whose runs are not made yet. Every run exists once."""
    now = timezone.now()  # every first run 2 s after the materialisers' now, however long the set-up takes
    for i in range(20):
        schedule, _ = upsert(endpoint, key=f"s{i}")
        _reset(schedule, 2 * S, now=now)
    results = at_once(lambda: schedule_create_runs(now=now))
    rows = list(ScheduledMessage.objects.filter(schedule__startswith="s").values_list("schedule", "due_at"))
    assert len(rows) == len(set(rows)) == 20 * 9  # at 2 s to 58 s
    assert sum(r.runs for r in results) == 20 * 9

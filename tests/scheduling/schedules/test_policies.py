"""schedules/services.py's policies of issue 49 on the real database: jitter (each run due at its
time moved by an offset fixed per run, its key on its time; an edit keeps a run whose time passed
while its jitter holds it back) and catch-up (runs missed in a downtime
made up within a window, oldest first, each once; older ones skipped and counted on the schedule)."""

from collections import Counter
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from harness.at_once import at_once
from scheduling.core import schedule_rules as rules
from scheduling.core.schedule_rules import run_time_of_key
from scheduling.models import Schedule, ScheduledMessage, default_team_id
from scheduling.schedules.services import schedule_create_runs, schedule_run_key
from tests.scheduling.schedules.conftest import runs, upsert

pytestmark = pytest.mark.django_db
S = timedelta(seconds=1)


def _reset(schedule, first_run_in, now):
    """As if none of its runs were made and beat had been down since its first run (at a whole
    second: the platform's due times are milliseconds)."""
    ScheduledMessage.objects.filter(schedule=schedule.key).delete()
    first = now.replace(microsecond=0) + first_run_in
    Schedule.objects.filter(pk=schedule.pk).update(anchor_at=first, next_run_at=first, last_run_at=None)
    return first


def test_each_run_is_due_at_its_time_moved_by_its_fixed_jitter(endpoint):
    schedule, _ = upsert(endpoint, jitter_seconds=5)
    made = runs("poll")
    nominal = [schedule.anchor_at + k * 7 * S for k in range(len(made))]
    assert len(made) == 8 and schedule.jitter_ms == 5000
    # the key keeps the run's time; the due time is moved by [0, 5 s), runs still in order
    assert [m.idempotency_key for m in made] == [schedule_run_key(schedule=schedule, run_at=t) for t in nominal]
    offsets = [(m.due_at - t) / timedelta(milliseconds=1) for m, t in zip(made, nominal)]
    assert all(0 <= o < 5000 for o in offsets) and len(set(offsets)) > 1, offsets
    # made again (the rows lost, the materialiser run again over the same runs): the same due times
    due = [m.due_at for m in made]
    now = timezone.now()
    ScheduledMessage.objects.filter(schedule="poll").delete()
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=schedule.anchor_at, last_run_at=None)
    assert schedule_create_runs(now=now).runs == 8
    assert [m.due_at for m in runs("poll")][:8] == due


def test_a_change_of_jitter_is_a_new_revision_and_one_of_catch_up_is_not(endpoint):
    schedule, _ = upsert(endpoint)
    assert schedule.jitter_ms is None and all(m.due_at == schedule.anchor_at + k * 7 * S
                                              for k, m in enumerate(runs("poll")))
    changed, _ = upsert(endpoint, catchup_seconds=600)
    assert changed.revision == 1 and changed.catchup_ms == 600_000
    changed, _ = upsert(endpoint, jitter_seconds="2.5", catchup_seconds=600)
    assert changed.revision == 2 and changed.jitter_ms == 2500
    current = runs("poll", idempotency_key__contains=":2:")
    assert current and any(m.due_at != changed.anchor_at + k * 7 * S for k, m in enumerate(current))


@pytest.mark.parametrize(("kwargs", "text"), [
    ({"interval_seconds": 7, "jitter_seconds": 7}, "must be below interval_seconds (7 s)"),
    ({"cron": "* * * * *", "jitter_seconds": 60}, "below the shortest gap between two runs (60 s)"),
    ({"interval_seconds": 7, "jitter_seconds": -1}, "0 or more"),
])
def test_a_jitter_that_would_pass_the_next_run_is_refused(endpoint, kwargs, text):
    with pytest.raises(ValidationError) as caught:
        upsert(endpoint, **kwargs)
    assert text in caught.value.message_dict["jitter_seconds"][0]
    assert not Schedule.objects.exists()


def test_a_cron_jitter_below_its_gap_is_taken(endpoint):
    schedule, _ = upsert(endpoint, cron="* * * * *", jitter_seconds=59)
    assert schedule.jitter_ms == 59_000


def test_catch_up_makes_the_runs_missed_within_its_window_oldest_first_and_counts_the_older(endpoint):
    schedule, _ = upsert(endpoint, catchup_seconds=60)
    now = timezone.now()
    first = _reset(schedule, -600 * S, now)  # down for 10 min: runs every 7 s from then
    made = schedule_create_runs(now=now)
    # 0 s to 539 s ago + 600 s: older than the window (78 runs); 546 s to 595 s: in it (8); 602 to 658 s: to come (9)
    assert (made.skipped, made.runs) == (78, 8 + 9)
    rows = runs("poll")
    assert [m.due_at for m in rows] == [first + k * 7 * S for k in range(78, 95)]
    # oldest first: made in that order (UUIDv7 ids are time-ordered)
    assert sorted(rows, key=lambda m: m.id) == rows
    schedule.refresh_from_db()
    assert schedule.runs_missed == 78 and schedule.last_run_missed_at == first + 77 * 7 * S
    assert schedule.next_run_at == first + 95 * 7 * S
    assert schedule_create_runs(now=now).runs == 0 and len(runs("poll")) == 17  # each once


def test_a_catch_up_of_zero_skips_every_missed_run_and_counts_them(endpoint):
    schedule, _ = upsert(endpoint, catchup_seconds=0, missed_runs="latest")  # catch-up decides, not missed_runs
    now = timezone.now()
    first = _reset(schedule, -600 * S, now)
    made = schedule_create_runs(now=now)
    assert (made.skipped, made.runs) == (86, 9)
    assert all(m.due_at > now for m in runs("poll"))
    schedule.refresh_from_db()
    assert schedule.runs_missed == 86 and schedule.last_run_missed_at == first + 85 * 7 * S


def test_without_catch_up_the_skipped_runs_are_counted_too(endpoint):
    schedule, _ = upsert(endpoint, missed_runs="latest")
    now = timezone.now()
    first = _reset(schedule, -600 * S, now)
    assert schedule_create_runs(now=now).skipped == 85
    schedule.refresh_from_db()
    assert schedule.runs_missed == 85 and schedule.last_run_missed_at == first + 84 * 7 * S


def test_catch_up_makes_at_most_a_bounded_number_of_runs_a_pass(endpoint, monkeypatch):
    monkeypatch.setattr("scheduling.schedules.services.MAX_RUNS_PER_PASS", 5)
    schedule, _ = upsert(endpoint, catchup_seconds=600)
    now = timezone.now()
    first = _reset(schedule, -300 * S, now)  # 43 runs missed (0 s to 294 s after first), all in the window
    counts = [schedule_create_runs(now=now).runs for _ in range(12)]
    assert counts == [5] * 10 + [2, 0]  # 43 missed and the next minute's 9 (0 s to 357 s: 52 runs)
    due = [m.due_at for m in runs("poll")]
    assert due == [first + k * 7 * S for k in range(52)]
    schedule.refresh_from_db()
    assert schedule.runs_missed == 0


@pytest.mark.django_db(transaction=True)
def test_two_materialisers_catching_up_at_once_make_each_run_once(endpoint):
    now = timezone.now()
    for i in range(10):
        schedule, _ = upsert(endpoint, key=f"c{i}", catchup_seconds=60, jitter_seconds=3)
        _reset(schedule, -600 * S, now)
    results = at_once(lambda: schedule_create_runs(now=now))
    rows = list(ScheduledMessage.objects.filter(schedule__startswith="c").values_list("schedule", "idempotency_key"))
    assert len(rows) == len(set(rows)) == 10 * 17
    assert sum(r.runs for r in results) == 10 * 17 and sum(r.skipped for r in results) == 10 * 78
    assert sum(Schedule.objects.values_list("runs_missed", flat=True)) == 10 * 78


def _held_back_key(team_id, run_at, now, jitter_ms, least=3 * S):
    """A schedule key whose run at ``run_at`` (passed) is due at least ``least`` after ``now``: its
    jitter still holds it back while the test edits the schedule (offsets are fixed per key and run)."""
    return next(key for key in (f"held-{n}" for n in range(1_000)) if run_at + timedelta(
        milliseconds=rules.jitter_offset_ms(seed=f"{team_id}:{key}", run_at=run_at, jitter_ms=jitter_ms)) > now + least)


def live_runs(key) -> Counter:
    """Its runs in flight, counted by their time by the rule (the key's)."""
    return Counter(run_time_of_key(k) for k in ScheduledMessage.objects.filter(
        schedule=key, status__in=["pending", "published"]).values_list("idempotency_key", flat=True))


def test_an_edit_keeps_a_run_whose_time_passed_while_its_jitter_holds_it_back_and_makes_none_twice(endpoint):
    now = timezone.now()
    run_at = now.replace(microsecond=0) - S  # its time has passed...
    key = _held_back_key(default_team_id(), run_at, now, 6_900)  # ...and it is due 3 s or more from now
    schedule, _ = upsert(endpoint, key=key, jitter_seconds="6.9", catchup_seconds=60)
    _reset(schedule, run_at - now.replace(microsecond=0), now)
    assert schedule_create_runs(now=now).runs == 9  # the run at run_at (caught up) and 8 to come, 7 s apart
    before = live_runs(key)
    assert before[run_at] == 1 and ScheduledMessage.objects.get(
        schedule=key, idempotency_key=schedule_run_key(schedule=schedule, run_at=run_at)).due_at > timezone.now()
    edited, _ = upsert(endpoint, key=key, payload={"job": "edited"}, jitter_seconds="6.9", catchup_seconds=60)
    assert edited.revision == schedule.revision + 1
    schedule_create_runs()  # the materialiser's next pass: no run made again
    after = live_runs(key)
    assert after[run_at] == 1  # kept, as made (the old revision's): not lost
    assert max(after.values()) == 1  # and no run twice
    times = sorted(after)
    assert times[0] == run_at and all(b - a == 7 * S for a, b in zip(times, times[1:]))  # no run lost after it
    kept = ScheduledMessage.objects.get(schedule=key, idempotency_key=schedule_run_key(schedule=schedule,
                                                                                        run_at=run_at))
    assert kept.status in ("pending", "published") and kept.payload == {"job": key}

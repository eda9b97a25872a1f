"""Recurring schedules through the client against the real platform."""

from datetime import datetime, timedelta, timezone

import pytest

from delayclient import BadRequest, NotFound


def test_upsert_list_pause_resume_delete(client, endpoint, unique):
    key = f"nightly-{unique}"
    made = client.schedules.upsert(key, endpoint.name, {"report": "daily"}, cron="30 2 * * *",
                                   timezone="Europe/Paris")
    assert made.created is True and made.key == key and made.next_run_at is not None
    changed = client.schedules.upsert(key, endpoint.name, {"report": "daily"}, cron="0 3 * * *",
                                      timezone="Europe/Paris")
    assert changed.created is False and changed.cron == "0 3 * * *" and changed.revision > made.revision
    assert key in [s.key for s in client.schedules.list()]
    assert client.schedules.pause(key).is_paused is True
    assert client.schedules.resume(key).is_paused is False
    assert client.schedules.get(key).key == key
    assert client.schedules.delete(key) is None
    with pytest.raises(NotFound):
        client.schedules.get(key)


def test_interval_schedule(client, endpoint, unique):
    made = client.schedules.upsert(f"every-{unique}", endpoint.name, {}, interval=90)
    assert made.interval_seconds == 90 and made.cron == ""
    client.schedules.delete(made.key)


def test_preview_of_a_cron_rule(client):
    after = datetime(2026, 3, 28, 12, tzinfo=timezone.utc)
    runs = client.schedules.preview(cron="30 2 * * *", timezone="Europe/Paris", after=after, count=3)
    # 02:30 does not exist in Paris on the 29th (02:00 -> 03:00): Debian's cron runs it at 03:00 CEST
    assert [r.isoformat() for r in runs] == ["2026-03-29T01:00:00+00:00", "2026-03-30T00:30:00+00:00",
                                             "2026-03-31T00:30:00+00:00"]
    with pytest.raises(BadRequest):
        client.schedules.preview(cron="61 * * * *")


def test_jitter_and_catch_up(client, endpoint, unique):
    made = client.schedules.upsert(f"spread-{unique}", endpoint.name, {}, interval=60, jitter=timedelta(seconds=30),
                                   catchup=3600)
    assert made.jitter_seconds == 30 and made.catchup_seconds == 3600 and made.runs_missed == 0
    assert timedelta(0) <= made.next_run_due_at - made.next_run_at < timedelta(seconds=30)
    (run,) = client.messages.list(schedule=made.key).first(1)
    assert timedelta(0) <= run.due_at - run.schedule_run_at < timedelta(seconds=30)
    with pytest.raises(BadRequest) as caught:
        client.schedules.upsert(made.key, endpoint.name, {}, interval=60, jitter=60)
    assert "below interval_seconds" in caught.value.fields["jitter_seconds"][0]
    client.schedules.delete(made.key)


def test_overlap(client, endpoint, unique):
    made = client.schedules.upsert(f"one-at-a-time-{unique}", endpoint.name, {}, interval=60, overlap="skip")
    assert made.overlap == "skip" and made.runs_overlap_skipped == 0
    assert client.schedules.get(made.key).overlap == "skip"
    assert client.schedules.upsert(made.key, endpoint.name, {}, interval=60).overlap == "allow"  # left out: allow
    with pytest.raises(BadRequest) as caught:
        client.schedules.upsert(made.key, endpoint.name, {}, interval=60, overlap="sometimes")
    assert "overlap" in caught.value.fields
    client.schedules.delete(made.key)

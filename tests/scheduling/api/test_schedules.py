"""/api/schedules/: the upsert (201 then 200), reads with next_run_at, pause/resume, delete,
the preview (daylight saving on both change days), 400s naming the field, permissions, and the
runs listed by ``/api/messages/?schedule=``. The e2e tests deliver the runs."""

from datetime import datetime, timedelta

import pytest

from scheduling.models import AuditEvent, Schedule, ScheduledMessage

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


@pytest.fixture
def body(endpoint_row):
    return {"key": "reports.daily", "endpoint": endpoint_row.name, "payload": {"report": "daily"},
            "cron": "30 2 * * *", "timezone": "Europe/Berlin"}


def test_post_creates_then_updates_the_same_key(api, body):
    created = api.post("/api/schedules/", body, format="json")
    assert created.status_code == 201, created.content
    data = created.json()
    assert data["key"] == "reports.daily" and data["cron"] == "30 2 * * *" and data["timezone"] == "Europe/Berlin"
    assert data["interval_seconds"] is None and data["revision"] == 1 and data["next_run_at"].endswith("Z")
    assert data["missed_runs"] == "skip" and data["is_paused"] is False
    updated = api.post("/api/schedules/", {**body, "cron": "0 3 * * *"}, format="json")
    assert updated.status_code == 200 and updated.json()["revision"] == 2 and updated.json()["cron"] == "0 3 * * *"
    assert Schedule.objects.count() == 1


def test_reads_list_and_detail(api, body):
    api.post("/api/schedules/", body, format="json")
    api.post("/api/schedules/", {**body, "key": "every-5s", "cron": "", "interval_seconds": 5}, format="json")
    listed = api.get("/api/schedules/").json()
    assert [s["key"] for s in listed["results"]] == ["every-5s", "reports.daily"]
    detail = api.get("/api/schedules/every-5s/").json()
    assert detail["interval_seconds"] == 5.0 and detail["next_run_at"]
    assert api.get("/api/schedules/missing/").status_code == 404


def test_the_runs_are_listed_by_the_schedules_key(api, body):
    api.post("/api/schedules/", {**body, "cron": "", "interval_seconds": 7}, format="json")
    runs = api.get("/api/messages/?schedule=reports.daily").json()["results"]
    assert len(runs) == 8 and {r["schedule"] for r in runs} == {"reports.daily"}
    assert api.get("/api/messages/?schedule=reports.daily&status=delivered").json()["results"] == []
    assert len(api.get("/api/messages/?schedule=reports.daily&status=published").json()["results"]) == 8


def test_pause_resume_and_delete(api, body):
    api.post("/api/schedules/", {**body, "cron": "", "interval_seconds": 7}, format="json")
    paused = api.post("/api/schedules/reports.daily/pause/")
    assert paused.status_code == 200 and paused.json()["is_paused"] and paused.json()["next_run_at"] is None
    assert not ScheduledMessage.objects.filter(schedule="reports.daily", status=Status.PUBLISHED).exists()
    resumed = api.post("/api/schedules/reports.daily/resume/")
    assert resumed.status_code == 200 and not resumed.json()["is_paused"]
    assert ScheduledMessage.objects.filter(schedule="reports.daily", status=Status.PUBLISHED).count() == 8
    assert api.delete("/api/schedules/reports.daily/").status_code == 204
    assert api.delete("/api/schedules/reports.daily/").status_code == 404
    assert not ScheduledMessage.objects.filter(schedule="reports.daily", status=Status.PUBLISHED).exists()


def test_the_preview_is_daylight_saving_correct_on_both_change_days(api):
    spring = api.get("/api/schedules/preview/", {"cron": "30 2 * * *", "timezone": "Europe/Berlin",
                                                 "after": "2026-03-27T12:00:00Z", "count": 3})
    assert spring.status_code == 200
    # 02:30 CET; 03:00 CEST (02:30 does not exist on 29 March); 02:30 CEST
    assert spring.json() == {"runs": ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]}
    autumn = api.get("/api/schedules/preview/", {"cron": "30 2 * * *", "timezone": "Europe/Berlin",
                                                 "after": "2026-10-24T12:00:00Z", "count": 3})
    # 25 October: 02:30 happens twice (CEST, then CET); one run, at the first
    assert autumn.json() == {"runs": ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z", "2026-10-27T01:30:00Z"]}
    interval = api.get("/api/schedules/preview/", {"interval_seconds": "1.5", "start_at": "2026-01-01T00:00:00Z",
                                                   "after": "2026-01-01T00:00:01Z", "count": 2})
    assert interval.json() == {"runs": ["2026-01-01T00:00:01.500000Z", "2026-01-01T00:00:03Z"]}


@pytest.mark.parametrize(("change", "field", "text"), [
    ({"cron": "61 2 * * *"}, "cron", "bad minute"),
    ({"cron": "30 2 * *"}, "cron", "has 4 fields"),
    ({"timezone": "Europe/Atlantis"}, "timezone", "unknown timezone"),
    ({"cron": "", "interval_seconds": 0.5}, "interval_seconds", "at least 1 s"),
    ({"interval_seconds": 60}, "cron", "exactly one"),
    ({"key": "a b"}, "key", "letters, digits"),
    ({"endpoint": "missing"}, "endpoint", "unknown endpoint"),
    ({"missed_runs": "all"}, "missed_runs", "not a valid choice"),
    ({"jitter_seconds": -1}, "jitter_seconds", "0 or more"),
    ({"jitter_seconds": 86_401}, "jitter_seconds", "at most 86,400 s"),
    ({"cron": "", "interval_seconds": 5, "jitter_seconds": 5}, "jitter_seconds", "below interval_seconds (5 s)"),
    ({"jitter_seconds": "soon"}, "jitter_seconds", "A valid number"),
    ({"catchup_seconds": 31 * 86_400 + 1}, "catchup_seconds", "at most 2,678,400 s"),
    ({"overlap": "sometimes"}, "overlap", "not a valid choice"),
    ({"start_at": "yesterday"}, "start_at", "Datetime has wrong format"),
    ({"start_at": "2026-01-02T00:00:00Z", "end_at": "2026-01-01T00:00:00Z"}, "end_at", "after start_at"),
])
def test_bad_input_is_a_400_naming_the_field_and_stores_nothing(api, body, change, field, text):
    response = api.post("/api/schedules/", {**body, **change}, format="json")
    assert response.status_code == 400, response.content
    assert text in response.json()[field][0]
    assert not Schedule.objects.exists() and not ScheduledMessage.objects.exists()


@pytest.mark.parametrize(("query", "field"), [({"cron": "* * *"}, "cron"), ({"cron": "* * * * *", "timezone": "x"},
                                               "timezone"), ({"cron": "* * * * *", "count": 101}, "count"),
                                              ({}, "cron")])
def test_a_bad_preview_is_a_400_naming_the_field(api, query, field):
    response = api.get("/api/schedules/preview/", query)
    assert response.status_code == 400 and field in response.json()


def test_permissions_are_the_role_in_the_team(api_as, body, team_key):
    viewer = api_as("viewer")
    assert viewer.get("/api/schedules/").status_code == 200
    assert viewer.post("/api/schedules/", body, format="json").status_code == 403
    assert not Schedule.objects.exists()
    member = api_as("member")
    assert member.post("/api/schedules/", body, format="json").status_code == 201
    assert viewer.post("/api/schedules/reports.daily/pause/").status_code == 403
    assert viewer.delete("/api/schedules/reports.daily/").status_code == 403
    reader = team_key("default", "read")  # a key needs the schedules scope
    assert reader.get("/api/schedules/reports.daily/").status_code == 200
    assert reader.post("/api/schedules/reports.daily/pause/").status_code == 403
    assert Schedule.objects.filter(is_paused=False).count() == 1
    assert team_key("default", "schedules").post("/api/schedules/reports.daily/pause/").status_code == 200
    assert Schedule.objects.filter(is_paused=True).count() == 1


def test_jitter_and_catch_up_are_set_shown_and_audited(api, body):
    interval = {**body, "cron": "", "interval_seconds": 7}
    assert api.post("/api/schedules/", interval, format="json").status_code == 201
    changed = api.post("/api/schedules/", {**interval, "jitter_seconds": 3, "catchup_seconds": 600}, format="json")
    assert changed.status_code == 200, changed.content
    data = changed.json()
    assert data["jitter_seconds"] == 3.0 and data["catchup_seconds"] == 600.0 and data["revision"] == 2
    assert data["runs_missed"] == 0 and data["last_run_missed_at"] is None
    offset = datetime.fromisoformat(data["next_run_due_at"]) - datetime.fromisoformat(data["next_run_at"])
    assert timedelta(0) <= offset < timedelta(seconds=3)
    event = AuditEvent.objects.filter(action="schedule.update").latest("id")
    assert (event.before["jitter_ms"], event.after["jitter_ms"]) == (None, 3000)
    assert (event.before["catchup_ms"], event.after["catchup_ms"]) == (None, 600_000)
    # each run shows its time by the rule and its due time, moved by [0, 3 s)
    runs = api.get("/api/messages/?schedule=reports.daily&status=published").json()["results"]
    moved = [datetime.fromisoformat(r["due_at"]) - datetime.fromisoformat(r["schedule_run_at"]) for r in runs]
    assert len(runs) == 8 and all(timedelta(0) <= m < timedelta(seconds=3) for m in moved), moved
    assert len(set(moved)) > 1
    cleared = api.post("/api/schedules/", interval, format="json").json()  # left out: back to none
    assert cleared["jitter_seconds"] is None and cleared["catchup_seconds"] is None
    assert cleared["next_run_due_at"] == cleared["next_run_at"]


def test_overlap_is_set_shown_audited_and_its_runs_listed_skipped(api, body):
    interval = {**body, "cron": "", "interval_seconds": 7}
    created = api.post("/api/schedules/", interval, format="json").json()
    assert created["overlap"] == "allow" and created["runs_overlap_skipped"] == 0
    changed = api.post("/api/schedules/", {**interval, "overlap": "buffer_one"}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["overlap"] == "buffer_one" and changed.json()["revision"] == 2
    event = AuditEvent.objects.filter(action="schedule.update").latest("id")
    assert (event.before["overlap"], event.after["overlap"]) == ("allow", "buffer_one")
    assert api.get("/api/schedules/reports.daily/").json()["overlap"] == "buffer_one"
    ScheduledMessage.objects.filter(schedule="reports.daily", status="published").update(status="skipped")
    skipped = api.get("/api/messages/?schedule=reports.daily&status=skipped").json()["results"]
    assert len(skipped) == 8 and {r["status"] for r in skipped} == {"skipped"}

"""Recurring schedules' overlap for real (issue 49): the API -> a worker whose beat runs the
materialiser -> the cascade -> the worker's delivery loop -> a webhook receiver that holds each call
2.5 s, slower than the schedule's 1 s interval. allow: calls overlap. skip: never two calls at once,
most runs ``skipped``. buffer_one: never two calls at once, never more than one run waiting."""

import time

import pytest

from harness.recording_server import RecordingServer
from harness.waiting import wait_until
from scheduling.models import Schedule, ScheduledMessage

pytestmark = [pytest.mark.e2e, pytest.mark.broker, pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("quick_window")]  # and quick_beat: tests/e2e/conftest.py
Status = ScheduledMessage.Status
HOLD, WATCH = 2.5, 8.0  # each call's length; how long the schedule runs


def overlapping(calls) -> int:
    """How many calls began before the one before them ended."""
    calls = sorted(calls)
    return sum(1 for (_, ended), (at, _) in zip(calls, calls[1:]) if at < ended)


@pytest.mark.parametrize("overlap", ["allow", "skip", "buffer_one"])
def test_a_schedule_slower_than_its_interval(api, platform, quick_beat, endpoint_name, overlap):
    with RecordingServer(hold_seconds=HOLD) as server:
        created = api.post("/api/endpoints/", {"name": endpoint_name, "topology": "v3", "handler": "webhook",
                                               "handler_target": server.url}, format="json")
        assert created.status_code == 201, created.content
        response = api.post("/api/schedules/", {"key": endpoint_name, "endpoint": endpoint_name, "payload": {},
                                                "interval_seconds": 1, "overlap": overlap}, format="json")
        assert response.status_code == 201, response.content
        runs = ScheduledMessage.objects.filter(schedule=endpoint_name)
        most_waiting, until = 0, time.monotonic() + WATCH
        while time.monotonic() < until:
            most_waiting = max(most_waiting, runs.filter(status=Status.WAITING).count())
            time.sleep(0.2)
        assert api.post(f"/api/schedules/{endpoint_name}/pause/").status_code == 200
        wait_until(lambda: server.in_flight == 0, 10, 0.1, "the last call returned")
        calls = [(r["at"], r["ended"]) for r in server.requests]
    skipped = list(runs.filter(status=Status.SKIPPED).values_list("last_error", flat=True))
    counted = Schedule.objects.get(key=endpoint_name).runs_overlap_skipped
    print(f"\noverlap {overlap}: {len(calls)} calls, {overlapping(calls)} overlapping, {len(skipped)} skipped, "
          f"at most {most_waiting} waiting")
    assert len(calls) >= 2
    if overlap == "allow":
        assert overlapping(calls) >= 1 and not skipped and counted == 0
        return
    assert overlapping(calls) == 0, sorted(calls)
    assert len(skipped) >= 2 and all("had not ended" in why for why in skipped), skipped
    wait_until(lambda: Schedule.objects.get(key=endpoint_name).runs_overlap_skipped == len(skipped), 5, 0.1,
               "the skips counted on the schedule")
    if overlap == "buffer_one":
        assert most_waiting <= 1
        assert runs.filter(waiting_since__isnull=False, status=Status.DELIVERED).exists()  # a buffered run ran

"""Recurring schedules' policies for real (issue 49): the API -> a worker whose beat runs the
materialiser -> the cascade -> a handler that writes one Receipt per call. Catch-up: beat and the
worker stopped across several runs, the runs missed meanwhile are each delivered once when they
are back. Jitter: runs of several schedules at the same times fall due spread over the window."""

import time
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from harness.testapp.models import Receipt
from harness.waiting import wait_until
from scheduling.core.schedule_rules import run_time_of_key
from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("quick_window")]  # and quick_beat: tests/e2e/conftest.py
Status = ScheduledMessage.Status
S = timedelta(seconds=1)


def receipts(messages) -> Counter:
    return Counter(Receipt.objects.filter(message_id__in=[str(m.id) for m in messages])
                   .values_list("message_id", flat=True))


def endpoint(api, name):
    created = api.post("/api/endpoints/", {"name": name, "handler": "celery_task",
                                           "handler_target": "testapp.record_receipt"}, format="json")
    assert created.status_code == 201, created.content


def test_runs_missed_while_beat_and_the_worker_were_down_are_each_delivered_once(api, platform, quick_beat,
                                                                                  endpoint_name):
    endpoint(api, endpoint_name)
    response = api.post("/api/schedules/", {"key": endpoint_name, "endpoint": endpoint_name, "payload": {"tick": 1},
                                            "interval_seconds": 1, "catchup_seconds": 60}, format="json")
    assert response.status_code == 201, response.content
    wait_until(lambda: ScheduledMessage.objects.filter(schedule=endpoint_name, status=Status.DELIVERED).count() >= 2,
               30, 0.2, "two runs delivered")
    quick_beat.stop()
    stopped = timezone.now()
    time.sleep(6)  # the runs of the 2 s made before the stop wait in the cascade; those after are missed
    # stamped before the start: start() returns once the worker is ready, and its beat may have
    # made the missed runs by then (stamped after, they looked made before it was back: 0 caught)
    restarting = timezone.now()
    quick_beat.start()
    back = timezone.now()
    mine = ScheduledMessage.objects.filter(schedule=endpoint_name)
    # every run due before 2 s after it was back has ended (pausing cancels the runs still in flight)
    wait_until(lambda: mine.filter(status=Status.DELIVERED, due_at__gte=back + 2 * S).exists()
               and not mine.filter(due_at__lt=back + 2 * S).exclude(status=Status.DELIVERED).exists(),
               30, 0.2, "the runs before back + 2 s delivered")
    api.post(f"/api/schedules/{endpoint_name}/pause/")

    runs = list(mine.filter(due_at__lt=back + 2 * S))
    assert {r.status for r in runs} == {Status.DELIVERED}
    times = sorted(run_time_of_key(r.idempotency_key) for r in runs)
    # every run from the first to the last delivered, none left out, each one message ...
    assert len(times) == len(set(times)) and all(b - a == S for a, b in zip(times, times[1:])), times
    # ... among them the runs no materialiser made before the stop, made once the beat was back
    caught = [r for r in runs if r.created_at >= restarting and r.due_at < restarting]
    assert len(caught) >= 3, (stopped, back, sorted((r.due_at, r.created_at) for r in runs))
    assert sorted(caught, key=lambda r: r.id) == sorted(caught, key=lambda r: r.due_at)  # made oldest first
    # each handled once: one receipt per delivered run
    assert receipts(runs) == Counter({str(r.id): 1 for r in runs})


def test_jitter_spreads_the_runs_of_schedules_at_the_same_times(api, platform, quick_beat, endpoint_name):
    endpoint(api, endpoint_name)
    start = (timezone.now() + 3 * S).replace(microsecond=0)
    keys = [f"{endpoint_name}-{n}" for n in range(4)]
    for key in keys:
        response = api.post("/api/schedules/", {"key": key, "endpoint": endpoint_name, "payload": {"key": key},
                                                "interval_seconds": 2, "jitter_seconds": 1.5,
                                                "start_at": start.isoformat()}, format="json")
        assert response.status_code == 201, response.content
    wait_until(lambda: ScheduledMessage.objects.filter(schedule__in=keys, status=Status.DELIVERED,
                                                       due_at__lt=start + 6 * S).count() >= 4 * 3, 30, 0.2,
               "three runs of each")
    for key in keys:
        api.post(f"/api/schedules/{key}/pause/")
    runs = list(ScheduledMessage.objects.filter(schedule__in=keys, status=Status.DELIVERED,
                                                due_at__lt=start + 6 * S))
    assert len(runs) == 4 * 3
    offsets = {(r.schedule, run_time_of_key(r.idempotency_key)): r.due_at - run_time_of_key(r.idempotency_key)
               for r in runs}
    assert {t for _, t in offsets} == {start, start + 2 * S, start + 4 * S}
    assert all(timedelta(0) <= o < 1.5 * S for o in offsets.values())
    assert len(set(offsets.values())) >= 6  # spread: not one due time for the schedules' shared run times
    # delivered at their jittered due times (generous bound), each once
    assert all(0 <= r.lateness_ms < 2500 for r in runs), [r.lateness_ms for r in runs]
    assert receipts(runs) == Counter({str(r.id): 1 for r in runs})

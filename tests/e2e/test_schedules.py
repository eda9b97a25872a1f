"""Recurring schedules for real: the API -> the materialiser in two workers' beats -> the
cascade -> a handler that writes one Receipt per call. An interval schedule fires on time,
once per run, and stops when paused, while two beats make its runs at once."""

import time
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from harness.celery_worker import start_workers
from harness.testapp.models import Receipt
from harness.waiting import wait_until
from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status


@pytest.fixture(scope="module")
def two_beats(worker_env):
    """Two workers, each with beat running the materialiser every second over a 3 s window: their
    passes overlap all the time."""
    env = {**worker_env, "DELAY_SCHEDULES_EVERY_SECONDS": "1", "DELAY_SCHEDULES_AHEAD_SECONDS": "3"}
    workers = start_workers("beat", env, 2)
    yield workers
    for w in workers:
        w.stop()


def test_an_interval_schedule_fires_on_time_once_per_run_and_stops_when_paused(api, platform, two_beats,
                                                                                endpoint_name):
    created = api.post("/api/endpoints/", {"name": endpoint_name, "handler": "celery_task",
                                           "handler_target": "testapp.record_receipt"}, format="json")
    assert created.status_code == 201, created.content
    response = api.post("/api/schedules/", {"key": endpoint_name, "endpoint": endpoint_name, "payload": {"tick": 1},
                                            "interval_seconds": 1}, format="json")
    assert response.status_code == 201, response.content
    started = timezone.now()
    # 8 s of runs: all but the first three made by the two beats (the upsert made those)
    wait_until(lambda: ScheduledMessage.objects.filter(schedule=endpoint_name, status=Status.DELIVERED,
                                                       due_at__gte=started + timedelta(seconds=8)).exists(),
               30, 0.2, "eight seconds of runs")
    paused = api.post(f"/api/schedules/{endpoint_name}/pause/")
    assert paused.status_code == 200
    paused_at = timezone.now()
    time.sleep(3)  # runs made before the pause, due in the next 3 s, were cancelled: nothing more arrives

    runs = list(ScheduledMessage.objects.filter(schedule=endpoint_name).order_by("due_at"))
    delivered = [r for r in runs if r.status == Status.DELIVERED]
    assert {r.status for r in runs} <= {Status.DELIVERED, Status.CANCELLED}
    assert len(delivered) >= 8
    # once per run: one message per run time, one handler call per message
    assert len({r.due_at for r in runs if r.status == Status.DELIVERED}) == len(delivered)
    calls = Counter(Receipt.objects.filter(message_id__in=[str(r.id) for r in runs]).values_list("message_id",
                                                                                                flat=True))
    assert calls == Counter({str(r.id): 1 for r in delivered})
    # on time: every second from the first, never early, a generous bound on lateness
    due = [r.due_at for r in delivered]
    assert all((b - a).total_seconds() == 1 for a, b in zip(due, due[1:]))
    assert all(0 <= r.lateness_ms < 2500 for r in delivered), [r.lateness_ms for r in delivered]
    # stopped: no run due after the pause was delivered, and runs due after it had been made
    assert all(r.due_at <= paused_at for r in delivered)
    assert [r for r in runs if r.status == Status.CANCELLED and r.due_at > paused_at]

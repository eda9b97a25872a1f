"""Set-ups the e2e modules share. The quick beat of the schedules' modules: a module asks for
``quick_beat`` (its worker) and marks itself ``pytest.mark.usefixtures("quick_window")`` so that
the test process's own upserts make their first runs over the same window as the worker's."""

import pytest

from harness.celery_worker import start_workers

QUICK_BEAT = {"DELAY_SCHEDULES_EVERY_SECONDS": "1", "DELAY_SCHEDULES_AHEAD_SECONDS": "2"}


@pytest.fixture(scope="module")
def quick_beat(worker_env, request):
    """One worker whose beat runs the materialiser every second over a 2 s window: a downtime
    longer than that misses runs (a test may stop it and start it again). Named after its module
    (test_schedule_overlap: ``overlap``), as its log is."""
    label = request.module.__name__.rpartition(".")[2].removeprefix("test_").removeprefix("schedule_")
    (worker,) = start_workers(label, {**worker_env, **QUICK_BEAT}, 1)
    yield worker
    worker.stop()


@pytest.fixture
def quick_window(settings):
    """The test process's materialiser window: the quick beat's."""
    settings.DELAY_SCHEDULES_EVERY_SECONDS, settings.DELAY_SCHEDULES_AHEAD_SECONDS = 1, 2

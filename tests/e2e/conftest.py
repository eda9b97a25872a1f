"""Set-ups the e2e modules share, one fixture per entity the modules kept making by hand: workers
(``worker`` itself, one per module, is tests/conftest.py's; ``two_workers`` for two loops sharing a
limit or a key's turn; ``quick_beat``), an endpoint through the API (``create_endpoint``) and
messages through the bulk API (``schedule_bulk``). The quick beat of the schedules' modules: a
module asks for ``quick_beat`` (its worker) and marks itself ``pytest.mark.usefixtures("quick_window")``
so that the test process's own upserts make their first runs over the same window as the worker's."""

import pytest

from harness.celery_worker import start_workers


def module_label(request) -> str:
    """The module's name without test_: the workers' names and their logs' (artifacts/)."""
    return request.module.__name__.rpartition(".")[2].removeprefix("test_")


QUICK_BEAT = {"DELAY_SCHEDULES_EVERY_SECONDS": "1", "DELAY_SCHEDULES_AHEAD_SECONDS": "2"}


@pytest.fixture(scope="module")
def quick_beat(worker_env, request):
    """One worker whose beat runs the materialiser every second over a 2 s window: a downtime
    longer than that misses runs (a test may stop it and start it again). Named after its module
    (test_schedule_overlap: ``overlap``), as its log is."""
    label = module_label(request).removeprefix("schedule_")
    (worker,) = start_workers(label, {**worker_env, **QUICK_BEAT}, 1)
    yield worker
    worker.stop()


@pytest.fixture
def quick_window(settings):
    """The test process's materialiser window: the quick beat's."""
    settings.DELAY_SCHEDULES_EVERY_SECONDS, settings.DELAY_SCHEDULES_AHEAD_SECONDS = 1, 2


@pytest.fixture(scope="module")
def two_workers(worker_env, request):
    """Two workers (each with beat and its delivery loop) for the module: a limit or a key's turn
    shared across loops, as in production."""
    workers = start_workers(module_label(request), worker_env, 2)
    yield workers
    for w in workers:
        w.stop()


@pytest.fixture
def create_endpoint(api, endpoint_name):
    """create_endpoint(**body) -> the created endpoint's JSON: named endpoint_name and on v3 unless
    the body says otherwise; a refusal fails the test with the API's answer."""

    def create(**body) -> dict:
        created = api.post("/api/endpoints/", {"name": endpoint_name, "topology": "v3", **body}, format="json")
        assert created.status_code == 201, created.content
        return created.json()

    return create


@pytest.fixture
def schedule_bulk(api):
    """schedule_bulk(messages) -> their ids, in the order given: one bulk request (at most 1,000)."""

    def schedule(messages: list[dict]) -> list[str]:
        response = api.post("/api/messages/bulk/", {"messages": messages}, format="json")
        assert response.status_code == 201, response.content
        return [m["id"] for m in response.json()["messages"]]

    return schedule

"""A real worker (with beat) started with LOG_FORMAT=json and LOG_DELIVERIES_LEVEL=DEBUG: every
line of its output is a JSON object, a batch's INFO summary carries its count, endpoints and
lateness, a delivery's DEBUG line carries the message's id, team, endpoint, version and lateness as
fields, and Celery's lines about idle runs of the periodic tasks are gone while a run that did work
keeps its "succeeded" line (delayplatform/logs.py)."""

import json
import os
import re

import pytest

from harness.celery_worker import Worker
from harness.paths import ARTIFACTS
from harness.waiting import wait_until
from scheduling.core.task_names import DRAIN_UNROUTABLE, RELAY_SWEEP, RELAY_TIMEOUTS
from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
PERIODIC = (RELAY_SWEEP, RELAY_TIMEOUTS, DRAIN_UNROUTABLE)


@pytest.fixture
def json_worker(worker_env):
    run_id = os.environ["DP_TEST_RUN_ID"]
    w = Worker(f"json-{run_id}", {**worker_env, "LOG_FORMAT": "json", "LOG_DELIVERIES_LEVEL": "DEBUG"},
               ARTIFACTS / f"worker-{run_id}-json.log",
               concurrency=1)
    w.log_path.unlink(missing_ok=True)
    yield w.start()
    w.stop()


def schedule(api, endpoint, delay):
    response = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": delay}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def delivered(message_id):
    return ScheduledMessage.objects.filter(id=message_id, status=ScheduledMessage.Status.DELIVERED).exists()


def test_json_lines_delivery_fields_and_quiet_periodic_tasks(api, platform, json_worker, endpoint_name):
    native, waiting = endpoint_name, f"{endpoint_name}-tm"
    for name, mode in ((native, "native"), (waiting, "timeout_manager")):
        response = api.post("/api/endpoints/", {"name": name, "topology": "v3", "delivery_mode": mode}, format="json")
        assert response.status_code == 201, response.content
    first, second = schedule(api, native, 0), schedule(api, waiting, 3)
    wait_until(lambda: delivered(first) and delivered(second), 30, message="both messages delivered")
    json_worker.stop()  # its shutdown notices are in the output too

    text = json_worker.log_text()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]  # raises on any other line
    assert len(lines) > 5 and all({"time", "level", "logger", "message"} <= set(line) for line in lines)

    logged = [line for line in lines if line["logger"] == "scheduling.deliveries"]
    deliveries = {line["message_id"]: line for line in logged if line["level"] == "DEBUG"}
    row = ScheduledMessage.objects.get(id=first)
    assert deliveries[first]["team"] == "default" and deliveries[first]["endpoint"] == native
    assert deliveries[first]["version"] == "v3"
    assert deliveries[first]["lateness_ms"] == row.lateness_ms and isinstance(row.lateness_ms, int)
    assert deliveries[second]["endpoint"] == waiting
    batches = [line for line in logged if line["level"] == "INFO"]  # a summary per batch
    assert sum(line["count"] for line in batches) == 2 and all(line["worker"] for line in batches)
    assert {name for line in batches for name in line["endpoints"]} == {f"default/{native}", f"default/{waiting}"}
    assert any(line["lateness_max_ms"] >= row.lateness_ms for line in batches)

    about_periodic = [line["message"] for line in lines if any(task in line["message"] for task in PERIODIC)]
    assert not [m for m in about_periodic if "Sending due task" in m or m.endswith("received")], about_periodic
    succeeded = [m for m in about_periodic if " succeeded in " in m]
    assert all(not m.endswith(": 0") for m in succeeded), succeeded
    # the timeout manager's run that published the second message is still there
    assert any(re.match(rf"Task {re.escape(RELAY_TIMEOUTS)}\[.*\] succeeded in .*: 1$", m) for m in succeeded)
    assert any(line["message"].startswith("timeout manager: published 1") for line in lines)

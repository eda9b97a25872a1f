"""A worker's delivery loop processes (DELAY_DELIVERY_PROCESSES, scheduling/worker/processes.py)
against a real worker: both loops deliver, each message once; a loop process SIGKILLed is started
again by its worker and nothing is lost; a worker stopped takes its loop processes with it."""

import os
import signal
import uuid
from pathlib import Path

import pytest

from harness.celery_worker import Worker
from harness.paths import ARTIFACTS
from harness.waiting import wait_until
from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status


def loop_processes(worker_pid: int) -> list[int]:
    """The worker's children started by multiprocessing's spawn (its loop processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == worker_pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def schedule(client, name: str, n: int, delay: float = 0.5) -> list[str]:
    response = client.post("/api/messages/bulk/", {"messages": [
        {"endpoint": name, "payload": {"n": i}, "delay_seconds": delay} for i in range(n)]}, format="json")
    assert response.status_code == 201, response.content
    return [m["id"] for m in response.json()["messages"]]


def delivered(ids):
    rows = ScheduledMessage.objects.filter(id__in=ids, status=Status.DELIVERED)
    return lambda: list(rows) if rows.count() == len(ids) else None


@pytest.fixture
def two_loops(worker_env):
    """A worker with the default's two loops: its own thread and one process."""
    run_id = os.environ["DP_TEST_RUN_ID"]
    worker = Worker(f"loops-{run_id}-{uuid.uuid4().hex[:4]}", {**worker_env, "DELAY_DELIVERY_PROCESSES": "2"},
                    ARTIFACTS / f"worker-{run_id}-loop-processes.log").start()
    yield worker
    worker.stop()


def consumed_by_both(worker: Worker, name: str):
    """Both loops consume the endpoint's queue (each says so in the worker's log)."""
    return lambda: worker.log_text().count(f"consuming endpoint queue default--{name}") >= 2


def test_both_loops_deliver_and_each_message_once(api, platform, two_loops, endpoint_name):
    wait_until(lambda: len(loop_processes(two_loops.process.pid)) == 1, 30, 0.2, "the loop process started")
    assert api.post("/api/endpoints/", {"name": endpoint_name, "topology": "v3"}, format="json").status_code == 201
    wait_until(consumed_by_both(two_loops, endpoint_name), 30, 0.1, "both loops consuming the queue")
    ids = []
    for n in range(8):  # envelopes of several due seconds: the broker spreads them over both consumers
        ids += schedule(api, endpoint_name, 250, delay=1.0 + n / 2)
    rows = wait_until(delivered(ids), 120, 0.2, "every message delivered")
    by = {row.delivered_by for row in rows}
    assert any(name.endswith("/2") for name in by) and any(not name.endswith("/2") for name in by), by
    assert all(row.delivery_count == 1 for row in rows)  # once: no loop took another's copy
    assert all(row.delivered_at >= row.due_at for row in rows)


def test_a_loop_process_killed_is_started_again_and_nothing_is_lost(api, platform, two_loops, endpoint_name):
    (first,) = wait_until(lambda: loop_processes(two_loops.process.pid) or None, 30, 0.2, "the loop process")
    assert api.post("/api/endpoints/", {"name": endpoint_name, "topology": "v3"}, format="json").status_code == 201
    wait_until(consumed_by_both(two_loops, endpoint_name), 30, 0.1, "both loops consuming the queue")
    ids = schedule(api, endpoint_name, 1000, delay=1.0)
    os.kill(first, signal.SIGKILL)
    (second,) = wait_until(lambda: [p for p in loop_processes(two_loops.process.pid) if p != first] or None,
                           60, 0.2, "the loop process started again")
    assert second != first
    ids += schedule(api, endpoint_name, 500, delay=1.0)
    rows = wait_until(delivered(ids), 120, 0.2, "every message delivered after the kill")
    assert len(rows) == 1500
    assert "exited with -9" in two_loops.log_text()


def test_a_worker_stopped_takes_its_loop_processes_with_it(two_loops):
    pids = wait_until(lambda: loop_processes(two_loops.process.pid) or None, 30, 0.2, "the loop process")
    worker_pid = two_loops.process.pid
    os.kill(worker_pid, signal.SIGTERM)  # the worker alone, as a supervisor stops it (not its group)
    two_loops.process.wait(60)
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), 30, 0.2, "the loop process gone")

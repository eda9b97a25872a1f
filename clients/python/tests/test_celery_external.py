"""A Celery app of another codebase (tests/extapp: its own module tree and worker process, the
client package and nothing of the platform's) delays its tasks through the platform: a task runs
once and never early, while it waits nothing is held in its worker, a cancelled one never runs,
a retry with a countdown goes through the platform, and a short delay keeps Celery's own path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import pytest

HERE = Path(__file__).resolve().parent


def wait_for(condition, timeout: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(every)


class ExternalWorker:
    def __init__(self, env: dict, log: Path, name: str):
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "extapp.app", "worker", "-n", f"{name}@%h", "-l", "INFO",
             "-c", "2", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=HERE, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: self._ready(), 60, "the external worker")
        except AssertionError as exc:
            self.stop()  # never left running behind a failed start
            raise AssertionError(f"{exc}; its log ends:\n{self.text()[-3000:]}") from None

    def _ready(self) -> bool:
        assert self.process.poll() is None, f"worker exited: {self.text()[-3000:]}"
        return " ready." in self.text()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def extapp(platform, tmp_path_factory):
    """The other codebase, configured by its environment (read when it is imported, as an app's
    settings are: so one endpoint and one worker for the module), its worker on the endpoint's queue."""
    if not platform.broker_url:
        pytest.skip("DELAYCLIENT_BROKER_URL not given: the Celery tests need the platform's broker")
    from delayclient import Client

    folder = tmp_path_factory.mktemp("extapp")
    with Client(platform.url, platform.key) as client:
        endpoint = client.endpoints.create(f"tasks-{uuid.uuid4().hex[:10]}", handler="celery_queue")
    env = {"EXTAPP_BROKER_URL": platform.broker_url, "EXTAPP_ENDPOINT": endpoint.name,
           "EXTAPP_QUEUE": endpoint.queue, "EXTAPP_RUNS": str(folder / "runs.jsonl"),
           "DELAY_PLATFORM_URL": platform.url, "DELAY_PLATFORM_KEY": platform.key}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    sys.path.insert(0, str(HERE))
    inherited = {k: v for k, v in os.environ.items() if k not in ("BROKER_URL", "CELERY_BROKER_URL")}
    worker = ExternalWorker({**inherited, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), saved_path()]))},
                            folder / "worker.log", f"ext-{endpoint.name}")
    try:
        from extapp import tasks

        yield tasks, worker, folder / "runs.jsonl", endpoint
    finally:
        worker.stop()
        sys.path.remove(str(HERE))
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)


def saved_path() -> str | None:
    return os.environ.get("PYTHONPATH")


def runs(path: Path, **match) -> list[dict]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [r for r in lines if all(r.get(k) == v for k, v in match.items())]


def queue_state(platform, queue: str) -> dict:
    parts = urlsplit(platform.management_url)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port}"
    answer = httpx.get(f"{base}/api/queues/{quote(platform.vhost, safe='')}/{quote(queue, safe='')}",
                       auth=(parts.username or "guest", parts.password or "guest"), timeout=10)
    answer.raise_for_status()
    return answer.json()


def test_countdown_runs_once_through_the_platform_never_early(extapp, client, platform, unique):
    tasks, worker, path, tasks_endpoint = extapp
    sent = time.time()
    result = tasks.record.apply_async(args=[unique], countdown=3)
    (message,) = [m for m in client.messages.list(endpoint=tasks_endpoint.name) if m.idempotency_key == result.id]
    assert message.payload["task"] == "extapp.tasks.record" and message.payload["id"] == result.id
    # while it waits, the broker's cascade holds it: the worker's queue has nothing, held or ready
    time.sleep(1)
    state = queue_state(platform, tasks_endpoint.queue)
    assert (state.get("messages_unacknowledged", 0), state.get("messages", 0)) == (0, 0)
    assert client.messages.get(message.id).status in ("pending", "published")  # the outbox or the cascade
    (run,) = wait_for(lambda: runs(path, token=unique), 30, "the task to run")
    assert run["at"] - sent >= 3.0 and run["id"] == result.id and run["eta"] is None  # no eta: never held
    assert run["message_id"] == message.id and run["retries"] == 0
    delivered = wait_for(lambda: client.messages.get(message.id).status == "delivered" and
                         client.messages.get(message.id), 10, "the claim to be recorded")
    assert delivered.delivered_at >= delivered.due_at
    time.sleep(2)  # a second run would show by now
    assert len(runs(path, token=unique)) == 1


def test_a_cancelled_task_never_runs(extapp, client, unique):
    from delayclient.celery import cancel

    tasks, worker, path, tasks_endpoint = extapp
    # long enough that a busy machine publishes it, and the test cancels it, before it is due
    result = tasks.record.apply_async(args=[unique], countdown=8)
    wait_for(lambda: any(m.status == "published" for m in client.messages.list(endpoint=tasks_endpoint.name)
                         if m.idempotency_key == result.id), 10, "it to be in the cascade")
    assert cancel(result.id, app=tasks.app) == 1
    # it still comes out of the cascade, and the worker's claim skips it
    wait_for(lambda: f"[{result.id}] skipped: cancelled" in worker.text(), 30, "the worker to skip it")
    assert runs(path, token=unique) == []
    assert cancel(result.id, app=tasks.app) == 0


def test_a_retry_with_countdown_goes_through_the_platform(extapp, client, unique):
    tasks, worker, path, tasks_endpoint = extapp
    result = tasks.flaky.apply_async(args=[unique], countdown=1)
    both = wait_for(lambda: len(runs(path, token=unique)) == 2 and runs(path, token=unique), 40, "the retry")
    first, second = both
    assert (first["retries"], second["retries"]) == (0, 1)
    assert second["at"] - first["at"] >= 2.0 and first["message_id"] != second["message_id"]
    keys = {m.idempotency_key: m for m in client.messages.list(endpoint=tasks_endpoint.name)}
    assert keys[f"{result.id}#retry1"].id == second["message_id"]  # the retry was the platform's message
    wait_for(lambda: client.messages.get(second["message_id"]).status == "delivered", 10, "the claim")
    time.sleep(2)
    assert len(runs(path, token=unique)) == 2


def test_below_the_threshold_celery_keeps_its_own_path(extapp, client, unique):
    tasks, worker, path, tasks_endpoint = extapp
    before = {m.id for m in client.messages.list(endpoint=tasks_endpoint.name)}
    result = tasks.record.apply_async(args=[unique], countdown=0.5)  # threshold_seconds is 1
    (run,) = wait_for(lambda: runs(path, token=unique), 20, "the task")
    assert run["message_id"] is None and run["eta"] is not None  # Celery's eta, no platform message
    assert {m.id for m in client.messages.list(endpoint=tasks_endpoint.name)} == before
    assert result.id == run["id"]


def test_an_eta_goes_through_the_platform(extapp, client, unique):
    tasks, worker, path, tasks_endpoint = extapp
    eta = datetime.now(timezone.utc) + timedelta(seconds=2)
    tasks.record.apply_async(args=[unique], eta=eta)
    (run,) = wait_for(lambda: runs(path, token=unique), 30, "the task")
    assert run["at"] >= eta.timestamp() and run["message_id"] is not None


# a keyed run whose end is not reported holds its key for the platform's lease (15 minutes): every
# wait below is far shorter, so a lost report fails the test instead of slowing it
TURN_TIMEOUT = 90


def _spans(path: Path, token: str) -> list[dict]:
    """The ordered task's runs of this test, one per run: its key, n, retries, start and end."""
    made: dict = {}
    for line in runs(path, task="ordered", token=token):
        run = made.setdefault((line["key"], line["n"], line["retries"]),
                              {"key": line["key"], "n": line["n"], "retries": line["retries"]})
        run[line["event"]] = line["at"]
        run["message_id"] = line["message_id"]
    return sorted(made.values(), key=lambda r: r.get("start", float("inf")))


def _assert_one_at_a_time(spans: list[dict]) -> None:
    for before, after in zip(spans, spans[1:]):
        assert after["start"] >= before["end"], f"two runs of key {before['key']} at once: {before} and {after}"


def test_ordering_key_runs_one_at_a_time_in_send_order(extapp, client, unique):
    """One key x 4 tasks due at the same second, on a worker with 2 processes: never two at once, in
    the order sent, all run once; a second key's tasks run the same way beside them. Each run's end
    is reported by PlatformTask.after_return: without it the next run waits for the lease."""
    tasks, worker, path, tasks_endpoint = extapp
    assert worker.process.args[worker.process.args.index("-c") + 1] == "2"  # two at once possible
    eta = datetime.now(timezone.utc) + timedelta(seconds=4)  # all sent before it is due, on a busy machine too
    sent = {}
    for n in range(4):
        for key in (f"a-{unique}", f"b-{unique}"):
            if key.startswith("b-") and n >= 2:
                continue  # the second key: two tasks
            result = tasks.ordered.apply_async(args=[unique, key, n], eta=eta, ordering_key=key)
            sent[(key, n)] = result.id
    done = wait_for(lambda: (s := _spans(path, unique)) and sum("end" in r for r in s) == 6 and s,
                    TURN_TIMEOUT, "the 6 keyed runs to end")
    for key, count in ((f"a-{unique}", 4), (f"b-{unique}", 2)):
        spans = [r for r in done if r["key"] == key]
        assert [r["n"] for r in spans] == list(range(count)), f"{key} ran out of order: {spans}"
        assert all(r["start"] >= eta.timestamp() and r["retries"] == 0 for r in spans)
        _assert_one_at_a_time(spans)
    by_id = {m.id: m for m in client.messages.list(endpoint=tasks_endpoint.name)}
    for (key, n), task_id in sent.items():
        (message,) = [m for m in by_id.values() if m.idempotency_key == task_id]
        assert message.ordering_key == key
        assert [r["message_id"] for r in done if (r["key"], r["n"]) == (key, n)] == [message.id]
    wait_for(lambda: all(client.messages.get(mid).status == "delivered" for mid in
                         [m.id for m in by_id.values() if m.idempotency_key in sent.values()]), 10, "all delivered")
    time.sleep(2)  # a second run of any would show by now
    assert len(_spans(path, unique)) == 6 and len(runs(path, task="ordered", token=unique)) == 12


def test_a_keyed_task_retried_below_the_threshold_keeps_its_turn(extapp, client, unique):
    """A keyed run that retries with a short countdown (Celery's own path for an unkeyed task) goes
    through the platform: its retry holds the key's turn, so the next task of the key runs after the
    retry's end, and soon (not after the lease)."""
    tasks, worker, path, tasks_endpoint = extapp
    key = f"r-{unique}"
    eta = datetime.now(timezone.utc) + timedelta(seconds=3)
    first = tasks.ordered.apply_async(args=[unique, key, 0], kwargs={"retry_countdown": 0.5}, eta=eta,
                                      ordering_key=key)
    tasks.ordered.apply_async(args=[unique, key, 1], eta=eta, ordering_key=key)
    spans = wait_for(lambda: (s := _spans(path, unique)) and sum("end" in r for r in s) == 3 and s,
                     TURN_TIMEOUT, "the first task, its retry and the second task to end")
    assert [(r["n"], r["retries"]) for r in spans] == [(0, 0), (0, 1), (1, 0)]
    _assert_one_at_a_time(spans)
    keys = {m.idempotency_key: m for m in client.messages.list(endpoint=tasks_endpoint.name)}
    assert spans[1]["message_id"] == keys[f"{first.id}#retry1"].id  # the retry was the platform's message


def test_a_retry_on_celerys_own_path_runs(extapp, client, unique):
    """A task that came out of the platform and retries with a countdown at or under the threshold
    (Celery's own path, which copies the run's headers) runs again: it is not claimed as a second copy
    of the platform's message (its id header is not copied) and so skipped as already run."""
    tasks, worker, path, tasks_endpoint = extapp
    result = tasks.quick_retry.apply_async(args=[unique], countdown=2)
    both = wait_for(lambda: len(runs(path, token=unique)) == 2 and runs(path, token=unique), 30,
                    f"the retry (worker log: {worker.log})")
    first, second = both
    assert (first["retries"], second["retries"]) == (0, 1) and first["id"] == second["id"] == result.id
    assert first["message_id"] is not None and second["message_id"] is None  # no claim: not the platform's
    assert f"[{result.id}] skipped" not in worker.text()
    time.sleep(2)
    assert len(runs(path, token=unique)) == 2

import json
import os
import time

from .app import app


def _record(**fields) -> None:
    """One line per run, appended: what the test counts."""
    line = json.dumps({**fields, "at": time.time()}) + "\n"
    fd = os.open(os.environ["EXTAPP_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@app.task(bind=True)
def record(self, token):
    _record(task="record", token=token, id=self.request.id, retries=self.request.retries,
            eta=self.request.eta, message_id=self.request.get("x-dp-message-id"))


@app.task(bind=True, max_retries=3)
def flaky(self, token):
    _record(task="flaky", token=token, id=self.request.id, retries=self.request.retries,
            message_id=self.request.get("x-dp-message-id"))
    if self.request.retries == 0:
        raise self.retry(countdown=2)


@app.task(bind=True, max_retries=3)
def ordered(self, token, key, n, seconds=0.3, retry_countdown=None):
    """A keyed task: its start and its end recorded around a sleep, so that two runs of one key at
    once show; with ``retry_countdown`` its first run retries once (Celery's ``self.retry``)."""
    fields = {"task": "ordered", "token": token, "key": key, "n": n, "id": self.request.id,
              "retries": self.request.retries, "message_id": self.request.get("x-dp-message-id")}
    _record(**fields, event="start")
    time.sleep(seconds)
    _record(**fields, event="end")
    if retry_countdown is not None and self.request.retries == 0:
        raise self.retry(countdown=retry_countdown)


@app.task(bind=True, max_retries=3)
def quick_retry(self, token):
    """Retries once with a countdown at or under threshold_seconds (1): Celery's own path."""
    _record(task="quick_retry", token=token, id=self.request.id, retries=self.request.retries,
            message_id=self.request.get("x-dp-message-id"))
    if self.request.retries == 0:
        raise self.retry(countdown=0.5)

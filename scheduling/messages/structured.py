"""Celery tasks sent through the API as data: ``{"task": "billing.tasks.remind", "args": [42],
"kwargs": {}}`` with the options people need (``id``, ``priority``, ``queue``, and ``retries``:
which retry of the task this is, for a worker that delays its retries through the API). The
platform builds the task message itself when it publishes (wire.outgoing_task): JSON, protocol 2, a fixed
set of headers. So no caller chooses a content type (no pickle), a header (no ``CC`` copying it
into other queues) or a task outside its team's allowlist. Pure."""

from __future__ import annotations

import json
import re

FIELDS = frozenset({"task", "args", "kwargs", "id", "priority", "queue", "retries"})
TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[.:][A-Za-z_][A-Za-z0-9_]*)*")  # a dotted Python-ish name
TASK_ID = re.compile(r"[A-Za-z0-9_.:-]{1,155}")
MAX_PRIORITY = 255
MAX_RETRIES = 100_000  # Celery's self.request.retries of a retry sent through the API


def task_problem(payload, *, queue: str, name: str) -> str | None:
    """Why ``payload`` is not a task this platform may send to the Celery queue ``queue`` (the
    endpoint ``name``), or None. A raw task message (``{"celery": ...}``, what DelayedTask stores)
    is refused: only the platform's own code sends those."""
    if not isinstance(payload, dict):
        return 'a Celery queue takes tasks as {"task": "...", "args": [...], "kwargs": {...}}'
    if "celery" in payload or "headers" in payload or "body" in payload:
        return ('a raw Celery task message is not accepted: send {"task": "...", "args": [...], "kwargs": {...}} '
                "and the platform builds the message")
    unknown = sorted(set(payload) - FIELDS)
    if unknown:
        return f"unknown task field(s) {', '.join(unknown)}: a task has {', '.join(sorted(FIELDS))}"
    task = payload.get("task")
    if not isinstance(task, str) or len(task) > 200 or not TASK_NAME.fullmatch(task):
        return "task must be a task's name, e.g. billing.tasks.remind"
    if not isinstance(payload.get("args", []), list):
        return "args must be a list"
    if not isinstance(payload.get("kwargs", {}), dict):
        return "kwargs must be an object"
    task_id = payload.get("id")
    if task_id is not None and (not isinstance(task_id, str) or not TASK_ID.fullmatch(task_id)):
        return "id must be 1 to 155 of letters, digits and . _ : -"
    priority = payload.get("priority")
    if priority is not None and (type(priority) is not int or not 0 <= priority <= MAX_PRIORITY):
        return f"priority must be a whole number from 0 to {MAX_PRIORITY}"
    retries = payload.get("retries")
    if retries is not None and (type(retries) is not int or not 0 <= retries <= MAX_RETRIES):
        return f"retries must be a whole number from 0 to {MAX_RETRIES:,}"
    given = payload.get("queue")
    if given is not None and given not in (queue, name):
        return f"queue must be this endpoint's queue ({queue!r}) or left out: the endpoint is the queue"
    return None


def task_body(payload: dict) -> bytes:
    """The protocol-2 body: [args, kwargs, embed]."""
    embed = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
    return json.dumps([payload.get("args", []), payload.get("kwargs", {}), embed], separators=(",", ":"),
                      ensure_ascii=False).encode()


def task_headers(payload: dict, task_id: str) -> dict:
    """The headers Celery's worker reads, and nothing a caller chose but the task, its id and which
    retry it is (``retries``: the worker's ``self.request.retries``, which ``max_retries`` counts)."""
    return {"lang": "py", "task": payload["task"], "id": task_id, "root_id": task_id, "parent_id": None,
            "group": None, "retries": payload.get("retries") or 0, "eta": None, "expires": None,
            "timelimit": [None, None], "argsrepr": None, "kwargsrepr": None}


def is_structured(payload) -> bool:
    return isinstance(payload, dict) and "task" in payload and "celery" not in payload

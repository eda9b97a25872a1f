"""Delay Celery tasks through the platform from an app of your own (no Django, nothing of the
platform's code): the delay is held by RabbitMQ's cascade, not by your worker's memory.

    from celery import Celery
    from delayclient.celery import PlatformTask, cancel, platform_queue

    # the URL `manage.py team_broker_user shop` printed: the team's own broker user
    app = Celery("shop", broker="amqp://dp-team.shop:…@rabbit/the platform's vhost", task_cls=PlatformTask)
    app.conf.update(team_worker_settings("shop"))              # its remote control and events: the team's
    app.conf.delay_platform = {"url": "https://delays.example.com", "key": "dpk_…", "endpoint": "tasks"}
    app.conf.task_queues = [platform_queue("shop--tasks")]     # the endpoint's queue: <team>--<endpoint>

    @app.task(bind=True, max_retries=3)
    def remind(self, invoice_id):
        try:
            ...
        except TemporaryError as exc:
            raise self.retry(exc=exc, countdown=600)        # through the platform too

    result = remind.apply_async(args=[42], countdown=3600)  # or eta=<aware datetime>
    cancel(result.id)                                        # stored: it will not run

``apply_async`` with a ``countdown``/``eta`` past ``threshold_seconds`` (default 0) sends the task
to the platform as data (``{"task", "args", "kwargs", "id"}``) on the team's ``celery_queue``
endpoint; shorter delays, and calls without one, take Celery's own path. When the task comes out
of the cascade into the endpoint's queue, any worker of that queue runs it at once; right before
it runs, the task claims it through the API (``POST /api/messages/<id>/claim/``), which records
the delivery and skips a cancelled task, or a second copy of one already run.
``apply_async(..., ordering_key="account-42")`` runs the tasks of a key one at a time in due order:
a claim out of turn skips the copy (the platform sends it again in its turn), and a run in turn
reports its end (``after_return``: ``POST /api/messages/<id>/ended/``) so the next one goes.

Settings (``app.conf.delay_platform``, each also read from the environment): ``url``
(DELAY_PLATFORM_URL), ``key`` (DELAY_PLATFORM_KEY: scopes ``write``, ``cancel`` and ``tasks``),
``endpoint`` (DELAY_PLATFORM_ENDPOINT), ``team`` (DELAY_PLATFORM_TEAM, where your key has several),
``threshold_seconds`` (DELAY_PLATFORM_THRESHOLD_SECONDS), ``timeout`` (seconds per request).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from celery import Task
from celery.exceptions import Ignore, Reject
from celery.utils import uuid as celery_uuid
from kombu import Queue
from kombu.utils.json import dumps as kombu_dumps

from . import errors
from .client import Client

log = logging.getLogger(__name__)

MESSAGE_ID_HEADER = "x-dp-message-id"  # on every message the platform publishes
PLATFORM_HEADER_PREFIX = "x-dp-"  # the platform's headers (the message id among them)
ORDERED = "dp_ordered_by"  # the request's mark: this run holds an ordering key's turn (its claim said so)
CONF_KEY = "delay_platform"
_ENV = {"url": "DELAY_PLATFORM_URL", "key": "DELAY_PLATFORM_KEY", "endpoint": "DELAY_PLATFORM_ENDPOINT",
        "team": "DELAY_PLATFORM_TEAM", "threshold_seconds": "DELAY_PLATFORM_THRESHOLD_SECONDS",
        "timeout": "DELAY_PLATFORM_TIMEOUT"}


@dataclass(frozen=True)
class Settings:
    url: str
    key: str
    endpoint: str
    team: str | None = None
    threshold_seconds: float = 0.0
    timeout: float = 10.0


def settings_of(app) -> Settings:
    """The app's ``delay_platform`` settings, the environment filling what they leave out."""
    given = dict(app.conf.get(CONF_KEY) or {})
    unknown = set(given) - set(_ENV)
    if unknown:
        raise ValueError(f"unknown {CONF_KEY} setting(s): {', '.join(sorted(unknown))}; known: {', '.join(_ENV)}")
    values = {name: given.get(name, os.environ.get(env)) for name, env in _ENV.items()}
    missing = [f"{name} ({_ENV[name]})" for name in ("url", "key", "endpoint") if not values[name]]
    if missing:
        raise ValueError(f"{CONF_KEY} needs {', '.join(missing)}")
    return Settings(url=str(values["url"]), key=str(values["key"]), endpoint=str(values["endpoint"]),
                    team=values["team"] or None,
                    threshold_seconds=float(values["threshold_seconds"] or 0),
                    timeout=float(values["timeout"] or 10))


_clients: dict = {}
_clients_lock = threading.Lock()


def client_of(app) -> tuple[Client, Settings]:
    """One client per app and process (made after a prefork worker forks, never shared across it)."""
    key = (id(app), os.getpid())
    with _clients_lock:
        if key not in _clients:
            settings = settings_of(app)
            _clients[key] = (Client(settings.url, settings.key, timeout=settings.timeout), settings)
        return _clients[key]


def _due(countdown, eta) -> datetime | None:
    if eta is not None:
        if isinstance(eta, str):
            eta = datetime.fromisoformat(eta)
        return eta if eta.tzinfo else eta.replace(tzinfo=timezone.utc)
    if countdown is not None:
        return datetime.now(timezone.utc) + timedelta(seconds=float(countdown))
    return None


def idempotency_key(task_id: str, retries: int) -> str:
    """The run's key: the task id, then ``<id>#retry<n>`` (what cancel-task matches)."""
    return task_id if not retries else f"{task_id}#retry{retries}"


def _plain(value):
    """Arguments as Celery's JSON serializer would send them (datetimes, UUIDs and Decimals in
    kombu's tagged form, which the worker's Celery decodes back)."""
    return json.loads(kombu_dumps(value))


def platform_queue(name: str, **kwargs) -> Queue:
    """The endpoint's queue for ``task_queues``: the platform declared it (classic or quorum, as
    it is set up), so the worker consumes it without declaring it again."""
    return Queue(name, no_declare=True, **kwargs)


def team_worker_settings(team: str) -> dict:
    """The Celery settings of a worker that connects with its team's own broker user (the URL
    ``python manage.py team_broker_user <team>`` prints): its remote control (pidbox and reply
    queues) and its events under the team's name, the only names that user may declare. Also
    what keeps a worker with Celery's default node name apart from the platform's own worker on
    the same host (``celery@host.celery.pidbox`` is the platform's).

        app.conf.update(team_worker_settings("shop"))
    """
    prefix = f"{team}--"
    return {"control_exchange": f"{prefix}celery", "event_exchange": f"{prefix}celeryev",
            "event_queue_prefix": f"{prefix}celeryev"}


def send_task_through_platform(task: Task, args, kwargs, *, task_id: str, due: datetime, retries: int = 0,
                               priority: int | None = None, countdown=None, ordering_key: str | None = None):
    """Store the run with the platform; the countdown is sent as a delay (the platform's clock)
    and an eta as a time. The idempotency key makes a retried request, or a task sent twice
    with the same id, one run; it also ties a retry (``<id>#retry<n>``) to its first run, whose
    ``ordering_key`` turn the retry holds."""
    client, settings = client_of(task.app)
    payload = {"task": task.name, "args": _plain(list(args or [])), "kwargs": _plain(dict(kwargs or {})),
               "id": task_id}
    if retries:
        payload["retries"] = retries
    if priority is not None:
        payload["priority"] = priority
    when = {"delay": float(countdown)} if countdown is not None else {"deliver_at": due}
    if ordering_key is not None:
        when["ordering_key"] = ordering_key
    return client.messages.schedule(settings.endpoint, payload, idempotency_key=idempotency_key(task_id, retries),
                                    team=settings.team, **when)


class PlatformTask(Task):
    """A Task whose delayed ``apply_async`` (and so ``retry(countdown=…)``) goes through the
    platform, and which claims each run that came out of the cascade before it starts."""

    def apply_async(self, args=None, kwargs=None, task_id=None, producer=None, link=None, link_error=None,
                    shadow=None, **options):
        countdown, eta = options.get("countdown"), options.get("eta")
        ordering_key = options.pop("ordering_key", None)
        due = _due(countdown, eta)
        # a retry of a run that holds a key's turn goes through the platform whatever its countdown
        keeps_turn = producer is None and not self.app.conf.task_always_eager and \
            self._retry_of_ordered_run(task_id, options)
        if keeps_turn or (ordering_key is not None and due is None):
            due = due or datetime.now(timezone.utc)  # the platform keeps its key's order
        elif due is None or producer is not None or self.app.conf.task_always_eager or \
                due - datetime.now(timezone.utc) <= timedelta(seconds=settings_of(self.app).threshold_seconds):
            if ordering_key is not None:
                raise ValueError("ordering_key needs the task to go through the platform (a countdown or eta past "
                                 "threshold_seconds, no producer, not eager)")
            return super().apply_async(args, kwargs, task_id=task_id, producer=producer, link=link,
                                       link_error=link_error, shadow=shadow, **_without_platform_headers(options))
        if link or link_error or options.get("chain") or shadow:
            raise ValueError("a task delayed through the platform travels as data: callbacks (link, link_error, "
                             "chains) and shadow names cannot go with it")
        task_id = task_id or celery_uuid()
        send_task_through_platform(self, args, kwargs, task_id=task_id, due=due, retries=options.get("retries") or 0,
                                   priority=options.get("priority"), countdown=None if eta is not None else countdown,
                                   ordering_key=ordering_key)
        return self.AsyncResult(task_id)

    def _retry_of_ordered_run(self, task_id, options) -> bool:
        """Whether this is Celery's ``retry`` of the running task while its run holds an ordering
        key's turn (its claim said ``ordered``): the retry must hold that turn too, which only a
        retry through the platform does (the platform ties ``<id>#retry<n>`` to its first run)."""
        request = self.request
        return bool(options.get("retries")) and task_id is not None and task_id == request.id and \
            bool(getattr(request, ORDERED, None))

    def before_start(self, task_id, args, kwargs):
        message_id = self.request.get(MESSAGE_ID_HEADER)
        if message_id and not self.request.is_eager:
            claim_or_skip(self, message_id)
        return super().before_start(task_id, args, kwargs)

    def after_return(self, status, retval, task_id, args, kwargs, einfo):
        """A run that holds an ordering key's turn (its claim said ``ordered``) reports its end, so
        the next message of the key goes; a retry keeps the key for the retry's run."""
        message_id = getattr(self.request, ORDERED, None)
        if message_id:
            report_end(self, message_id, retrying=status == "RETRY")
        return super().after_return(status, retval, task_id, args, kwargs, einfo)


def _without_platform_headers(options: dict) -> dict:
    """The options without the platform's ``x-dp-*`` headers. Celery's ``retry`` copies the running
    task's headers into the retry's message: a retry of a task that came out of the platform, sent
    on Celery's own path, would carry that message's id, be claimed as a second copy of a message
    already run, and be skipped. They describe the message the platform published, not this one."""
    headers = options.get("headers")
    if not headers or not any(str(name).startswith(PLATFORM_HEADER_PREFIX) for name in headers):
        return options
    kept = {name: value for name, value in headers.items() if not str(name).startswith(PLATFORM_HEADER_PREFIX)}
    return {**options, "headers": kept}


def claim_or_skip(task: Task, message_id: str) -> None:
    """Ask the platform whether this run goes ahead (Ignore: it does not). With the platform
    unreachable, a task that acks late goes back to its queue (Reject) to be claimed later; one
    acked early runs: losing it would be worse than running a cancelled one."""
    client, _ = client_of(task.app)
    redelivered = bool((task.request.delivery_info or {}).get("redelivered"))
    try:
        claim = client.messages.claim(message_id, redelivered=redelivered, worker=task.request.hostname or None)
    except errors.DelayError as exc:
        if task.acks_late:
            log.warning("task %s[%s]: claim failed (%s); back to its queue", task.name, task.request.id, exc)
            raise Reject(str(exc), requeue=True) from exc
        log.error("task %s[%s]: claim failed (%s); running it unclaimed", task.name, task.request.id, exc)
        return
    if not claim.run:
        log.info("task %s[%s] skipped: %s", task.name, task.request.id,
                 {"cancelled": "cancelled", "waiting": "not its ordering key's turn (it comes again when it is)",
                  "skipped": "its schedule's previous run had not ended"}.get(claim.status, "already run"))
        raise Ignore()
    if claim.ordered:  # its end is reported (after_return), so the next message of its key goes
        setattr(task.request, ORDERED, message_id)


def report_end(task: Task, message_id: str, *, retrying: bool) -> None:
    """Tell the platform that a run holding an ordering key's turn ended. Never raises: a report
    that fails leaves the key held until its lease passes (15 minutes), then the platform lets it go."""
    client, _ = client_of(task.app)
    try:
        client.messages.ended(message_id, retrying=retrying)
    except errors.DelayError as exc:
        log.warning("task %s[%s]: its end not reported (%s); its ordering key goes when its lease passes",
                    task.name, task.request.id, exc)


def cancel(task_id: str, *, app=None) -> int:
    """Cancel every waiting run of ``task_id`` (its first run and delayed retries); how many.
    Stored, unlike ``revoke``: a worker started later skips them too."""
    from celery import current_app

    client, settings = client_of(app or current_app)
    return client.messages.cancel_task(task_id, endpoint=settings.endpoint, team=settings.team)

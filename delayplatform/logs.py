"""Logging for web and worker: Django's LOGGING, built here from the LOG_* settings (read and
checked by scheduling/config/specs.py).

- ``LOG_FORMAT=plain`` (default) or ``json`` (one JSON object per line, python-json-logger, with a
  record's extra fields as keys: a delivery line carries message_id, team, endpoint, version and
  lateness_ms). In a worker, Celery's own task logger and its banner follow suit (see
  :func:`connect_celery`).
- Beat runs the sweeper, the timeout manager, the unroutable drain and the schedules' runs every
  1-5 s. Celery logs three INFO lines per run (beat's "Sending due task", the worker's "received"
  and "succeeded"), which buried the deliveries in ``make run``'s console: :class:`QuietIdlePeriodicTasks`
  drops them for those tasks, except the "succeeded" line of a run that did something (it returns
  a count, or counts, not all zero). With the root level at DEBUG (LOG_LEVEL=DEBUG, or ``celery
  worker -l DEBUG``) every line shows again.
- Under the logger ``scheduling.deliveries``, one INFO line per delivery batch and one DEBUG line per
  delivery; ``LOG_DELIVERIES_LEVEL`` (default INFO; DEBUG shows the per-delivery lines, WARNING
  silences both) sets its level.
"""

from __future__ import annotations

import ast
import logging
import logging.config
import sys

from scheduling.core import task_names, traceparent

PERIODIC_TASKS = frozenset({task_names.RELAY_SWEEP, task_names.RELAY_TIMEOUTS, task_names.DRAIN_UNROUTABLE,
                            task_names.SCHEDULE_RUNS, task_names.ORDERING_SWEEP})
PLAIN = "%(asctime)s %(levelname)s %(name)s %(message)s"


class TraceIds(logging.Filter):
    """A line about a message carries its trace's ``trace_id`` and ``span_id`` (keys of the JSON
    format; docs/observability/logs.md): the ``traceparent`` it was logged with
    (``extra={"traceparent": ...}``, the worker's lines about a message, tracing on or off), else
    the span current when it was logged. Nothing imported unless tracing loaded OpenTelemetry in
    this process (scheduling/observability/tracing.py)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "traceparent" in record.__dict__:  # the ids say it; None or a bad value is not logged
            if (given := traceparent.parse(record.__dict__.pop("traceparent"))) is not None:
                record.trace_id, record.span_id = traceparent.trace_id(given), traceparent.span_id(given)
                return True
        otel = sys.modules.get("opentelemetry.trace")
        if otel is not None:
            context = otel.get_current_span().get_span_context()
            if context.is_valid:
                record.trace_id, record.span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
        return True


class QuietIdlePeriodicTasks(logging.Filter):
    """Drop Celery's INFO lines about the platform's periodic tasks, unless a run did work."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or logging.getLogger().isEnabledFor(logging.DEBUG):
            return True
        if record.name == "celery.beat":
            args = record.args if isinstance(record.args, tuple) else ()
            return not (str(record.msg).startswith("Scheduler: Sending due task") and args[-1:]
                        and args[-1] in PERIODIC_TASKS)
        if record.name in ("celery.worker.strategy", "celery.app.trace"):
            context = getattr(record, "data", None)
            if not isinstance(context, dict) or context.get("name") not in PERIODIC_TASKS:
                return True
            return did_work(context.get("return_value", "0"))  # "received" has none: dropped
        return True


def did_work(return_value: str) -> bool:
    """A periodic task's result as Celery logs it: a count, or a dict of counts (the schedules')."""
    if return_value in ("0", "None"):
        return False
    try:
        value = ast.literal_eval(return_value)
    except (ValueError, SyntaxError):
        return True
    return bool(any(value.values()) if isinstance(value, dict) else value)


def json_formatter() -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter("%(levelname)s %(name)s %(message)s", timestamp="time",
                         rename_fields={"levelname": "level", "name": "logger"})


def config(*, log_format: str, root_level: str, deliveries_level: str) -> dict:
    """The LOGGING dict: one console handler with the chosen formatter and the quiet filter."""
    formatter = {"()": "delayplatform.logs.json_formatter"} if log_format == "json" else {"format": PLAIN}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"console": formatter},
        "filters": {"quiet_idle_periodic_tasks": {"()": "delayplatform.logs.QuietIdlePeriodicTasks"},
                    "trace_ids": {"()": "delayplatform.logs.TraceIds"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "console",
                                 "filters": ["quiet_idle_periodic_tasks", "trace_ids"]}},
        "root": {"handlers": ["console"], "level": root_level},
        "loggers": {"scheduling.deliveries": {"level": deliveries_level}},
    }


def configure(config: dict) -> None:
    """Django's LOGGING_CONFIG: the dict, and in JSON mode Python's warnings as log records (a
    warning printed as is would be a plain-text line among the JSON ones)."""
    logging.config.dictConfig(config)
    if _json():
        logging.captureWarnings(True)


def _json() -> bool:
    from django.conf import settings

    return getattr(settings, "LOG_FORMAT", "plain") == "json"


def _json_handlers(**kwargs) -> None:
    """Celery gives its task logger (and multiprocessing's) a handler of its own: JSON too."""
    if _json():
        for name in ("celery.task", "multiprocessing"):
            for handler in logging.getLogger(name).handlers:
                handler.setFormatter(json_formatter())


def _say(msg, f=None) -> None:
    logging.getLogger("celery.apps.worker").warning(str(msg).strip())


def _early(**kwargs) -> None:
    """A worker warns (running as root, say) before Django sets logging up: in JSON mode, set it
    up first (Django does it again, the same way, when Celery sets Django up)."""
    if _json():
        from django.conf import settings
        from django.utils.log import configure_logging

        configure_logging(settings.LOGGING_CONFIG, settings.LOGGING)


def _no_banner(sender=None, instance=None, **kwargs) -> None:
    """The banner is plain text on stdout: in JSON mode, one log line instead; and the shutdown
    notices Celery prints ("worker: Warm shutdown") are logged."""
    if _json():
        from celery.apps import worker as celery_worker

        instance.quiet = True
        celery_worker.safe_say = _say
        logging.getLogger("celery.apps.worker").info("worker %s starting", sender)


def connect_celery() -> None:
    """Called by the Celery app (delayplatform/celery.py); each receiver checks LOG_FORMAT when
    the worker starts, so nothing reads settings while the app is imported."""
    from celery import signals

    signals.after_setup_logger.connect(_json_handlers, weak=False)
    signals.after_setup_task_logger.connect(_json_handlers, weak=False)
    signals.celeryd_init.connect(_early, weak=False)
    signals.celeryd_after_setup.connect(_no_banner, weak=False)

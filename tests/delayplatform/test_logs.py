"""The logging configuration: which of Celery's lines about the periodic tasks are dropped (records
made by Celery's own logging calls), the JSON formatter, and one-line errors for bad settings."""

import io
import json
import logging
import subprocess
import sys

import pytest
from celery import beat
from celery.app import trace
from celery.worker import strategy
from django.core.exceptions import ImproperlyConfigured

from delayplatform import logs
from harness.paths import ROOT
from scheduling.config import specs
from scheduling.core import task_names


@pytest.fixture
def console():
    """The console handler as LOGGING builds it, on Celery's three loggers; yields the text."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.QuietIdlePeriodicTasks())
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    loggers = [logging.getLogger(name) for name in ("celery.app.trace", "celery.worker.strategy", "celery.beat")]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    root_level = logging.getLogger().level
    logging.getLogger().setLevel(logging.INFO)
    yield stream
    logging.getLogger().setLevel(root_level)
    for lg, (level, propagate) in zip(loggers, saved):
        lg.removeHandler(handler)
        lg.setLevel(level)
        lg.propagate = propagate


def celery_lines(task: str, return_value: str) -> None:
    """The three INFO lines Celery logs for one beat-scheduled run, as Celery logs them."""
    beat.info("Scheduler: Sending due task %s (%s)", "entry", task)
    context = {"id": "abc", "name": task, "args": "()", "kwargs": "{}", "eta": None}
    strategy.logger.info(trace.LOG_RECEIVED, context, extra={"data": context})  # as default() does
    trace.info(trace.LOG_SUCCESS, {"id": "abc", "name": task, "return_value": return_value, "runtime": 0.001,
                                   "args": "()", "kwargs": "{}"})


@pytest.mark.parametrize("task", [task_names.RELAY_SWEEP, task_names.RELAY_TIMEOUTS, task_names.DRAIN_UNROUTABLE,
                                  task_names.SCHEDULE_RUNS])
def test_idle_runs_of_the_periodic_tasks_log_nothing(console, task):
    celery_lines(task, "0")
    assert console.getvalue() == ""


def test_a_run_that_did_work_keeps_its_succeeded_line(console):
    celery_lines(task_names.RELAY_TIMEOUTS, "3")
    assert console.getvalue().splitlines() == [
        f"celery.app.trace Task {task_names.RELAY_TIMEOUTS}[abc] succeeded in 0.001s: 3"]


def test_the_schedules_runs_log_only_when_they_made_or_skipped_some(console):
    celery_lines(task_names.SCHEDULE_RUNS, "{'schedules': 0, 'runs': 0, 'skipped': 0}")
    assert console.getvalue() == ""  # no run due to be made: routine
    celery_lines(task_names.SCHEDULE_RUNS, "{'schedules': 1, 'runs': 2, 'skipped': 0}")
    assert console.getvalue().splitlines() == [
        f"celery.app.trace Task {task_names.SCHEDULE_RUNS}[abc] succeeded in 0.001s: "
        "{'schedules': 1, 'runs': 2, 'skipped': 0}"]


def test_other_tasks_keep_every_line(console):
    celery_lines("billing.tasks.invoice", "0")
    assert len(console.getvalue().splitlines()) == 3


def test_failures_are_never_dropped(console):
    logging.getLogger("celery.app.trace").error("Task %(name)s[%(id)s] raised", {"name": task_names.RELAY_SWEEP,
                                                                                 "id": "x"})
    assert "raised" in console.getvalue()


def test_debug_shows_every_line(console):
    logging.getLogger().setLevel(logging.DEBUG)
    celery_lines(task_names.RELAY_SWEEP, "0")
    assert len(console.getvalue().splitlines()) == 3


def test_json_lines_carry_extra_fields():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.json_formatter())
    logger = logging.getLogger("tests.json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("delivered %s", "m1", extra={"message_id": "m1", "lateness_ms": 4})
    finally:
        logger.removeHandler(handler)
    line = json.loads(stream.getvalue())
    assert line["message"] == "delivered m1" and line["level"] == "WARNING" and line["logger"] == "tests.json"
    assert line["message_id"] == "m1" and line["lateness_ms"] == 4 and line["time"]


def read(**environ) -> dict:
    return specs.read(environ)


@pytest.mark.parametrize(("value", "expected"), [(None, "plain"), ("", "plain"), ("JSON", "json"), (" plain ", "plain")])
def test_log_format_values(value, expected):
    assert read(**({} if value is None else {"LOG_FORMAT": value}))["log_format"] == expected


def test_an_unknown_log_format_stops_start_up_with_one_line():
    with pytest.raises(ImproperlyConfigured, match=r"^LOG_FORMAT must be plain or json, not 'xml'$"):
        read(LOG_FORMAT="xml")
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "SECRET_KEY": "x", "LOG_FORMAT": "xml"}, timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].endswith("LOG_FORMAT must be plain or json, not 'xml'")


def test_an_unknown_level_is_refused():
    with pytest.raises(ImproperlyConfigured, match="^LOG_DELIVERIES_LEVEL must be DEBUG, INFO"):
        read(LOG_DELIVERIES_LEVEL="chatty")
    assert read()["log_level"] == "INFO" and read(LOG_LEVEL="warn")["log_level"] == "WARN"


def test_the_configuration_puts_the_filter_on_the_console():
    config = logs.config(log_format="json", root_level="INFO", deliveries_level="WARNING")
    assert config["handlers"]["console"]["filters"] == ["quiet_idle_periodic_tasks", "trace_ids"]
    assert config["formatters"]["console"] == {"()": "delayplatform.logs.json_formatter"}
    assert config["loggers"]["scheduling.deliveries"] == {"level": "WARNING"}


def test_a_line_logged_in_a_span_carries_its_trace_and_span_ids():
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext

    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    assert logs.TraceIds().filter(record) and not hasattr(record, "trace_id")  # no span: nothing added
    span = NonRecordingSpan(SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, is_remote=False))
    with trace.use_span(span):
        assert logs.TraceIds().filter(record)
    assert (record.trace_id, record.span_id) == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


def test_a_line_about_a_message_carries_its_traceparent_s_ids_over_the_current_span():
    """The worker's lines about a message say its trace (extra={"traceparent": ...}), tracing on or
    off; an invalid or missing one adds nothing and the key itself is not logged."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext

    def filtered(traceparent):
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, None)
        record.traceparent = traceparent
        assert logs.TraceIds().filter(record) and not hasattr(record, "traceparent")
        return getattr(record, "trace_id", None), getattr(record, "span_id", None)

    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert filtered(given) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    assert filtered(None) == (None, None) and filtered("00-nope") == (None, None)
    current = NonRecordingSpan(SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, is_remote=False))
    with trace.use_span(current):
        assert filtered(given) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")  # the message's
        assert filtered(None) == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")  # else the span's

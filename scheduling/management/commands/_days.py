"""Date options of the report commands: YYYY-MM-DD (UTC days), one-line errors for bad input."""

from datetime import date

from django.core.management.base import CommandError

from scheduling.reports.export import ExportError
from scheduling.reports.spark_job import SparkJobFailed

# What a report command turns into "CommandError: <one line>" instead of a traceback (database
# errors: every command's, _base.PlatformCommand).
REPORT_ERRORS = (ExportError, SparkJobFailed)


def parse_day(value: str, option: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise CommandError(f"{option}: not a date (YYYY-MM-DD): {value!r}") from None


def day_range(since: date, until: date) -> tuple[date, date]:
    if until < since:
        raise CommandError(f"--until {until} is before --since {since}")
    return since, until


def one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

"""Reads of the database for the accuracy report: the facts it counts (the messages due on its
days, the archive's files of those days) and its rows, for the admin's table and charts."""

from datetime import date, datetime

from django.db.models import F, Q

from ..lifecycle import Status
from ..models import AccuracyReport, ArchiveFile, ScheduledMessage

# --- the accuracy report's facts -------------------------------------------------------------


def message_list_due_between(*, since: datetime, until: datetime):
    """The messages the accuracy report counts on the days of [since, until): due in it, where due
    is the later of due_at and created_at (the lifecycle's rule), so a message scheduled in the
    past counts on the day it was accepted, not on a day whose report ran long ago. Filters on
    the message's own columns only (archive/parquet.py reads them through COPY)."""
    due_in_range = Q(due_at__gte=since, due_at__lt=until, created_at__lt=until)
    # status IN (every status) lets PostgreSQL range-scan the (status, created_at) index for the
    # few backdated rows instead of reading the whole table (there is no index on created_at alone)
    accepted_in_range = Q(due_at__lt=since, status__in=list(Status), created_at__gte=since, created_at__lt=until)
    return ScheduledMessage.objects.filter(due_in_range | accepted_in_range).order_by()


def archive_file_list(*, first_day: date, last_day: date) -> list[ArchiveFile]:
    """The archive's files of messages due on these days (its list: what a prune committed)."""
    return list(ArchiveFile.objects.filter(day__range=(first_day, last_day)).order_by("day", "path"))


# --- the accuracy report --------------------------------------------------------------------------

REPORT_DIMENSIONS = ("endpoint", "version", "delivery_mode", "delay_bucket")
ALL = AccuracyReport.ALL


def accuracy_report_get_latest_day() -> date | None:
    return AccuracyReport.objects.order_by("-day").values_list("day", flat=True).first()


def accuracy_report_list_slice(*, first_day: date, last_day: date, **dimensions: str) -> list[AccuracyReport]:
    """One row per day for one slice: each dimension a value, or ALL (the default). Only the
    slices the job computes have rows: all four dimensions, exactly one, or none."""
    selected = {name: dimensions.get(name, ALL) for name in REPORT_DIMENSIONS}
    return list(AccuracyReport.objects.filter(day__range=(first_day, last_day), **selected).order_by("day"))


def accuracy_report_list_breakdown(*, day: date, by: str) -> list[AccuracyReport]:
    """The day's rollup rows by one dimension (per endpoint, per version, per delay bucket)."""
    others = {name: ALL for name in REPORT_DIMENSIONS if name != by}
    return list(AccuracyReport.objects.filter(day=day, **others).exclude(**{by: ALL}).order_by(by))


def accuracy_report_list_problems(*, first_day: date, last_day: date) -> list[AccuracyReport]:
    """Groups (not rollups) with lost, duplicated or early messages, worst first."""
    groups = AccuracyReport.objects.filter(day__range=(first_day, last_day)).exclude(
        Q(endpoint=ALL) | Q(version=ALL) | Q(delivery_mode=ALL) | Q(delay_bucket=ALL))
    return list(groups.filter(Q(lost__gt=0) | Q(duplicates__gt=0) | Q(early__gt=0))
                .order_by((F("lost") + F("duplicates") + F("early")).desc(), "-day"))


def accuracy_report_list_values(*, dimension: str) -> list[str]:
    """The values one dimension takes in the report (for filters); ALL excluded."""
    values = AccuracyReport.objects.exclude(**{dimension: ALL}).order_by(dimension)
    return list(values.values_list(dimension, flat=True).distinct())

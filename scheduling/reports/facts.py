"""Reads of the database for the accuracy report: the facts it counts (the messages due on its
days, the archive's files of those days) and its rows, for the admin's table and charts.

Every read of the rows takes the caller's scope, ``team_ids`` (``Caller.team_ids(Action.READ)``):
None for an operator, who sees every row, the platform-wide ones (team ``*``) included; else
the rows of those teams only, never a ``*`` row, whose figures mix every team's messages."""

from collections.abc import Collection
from datetime import date, datetime

from django.db.models import F, Q, QuerySet

from scheduling.core.lifecycle import Status
from scheduling.models import AccuracyReport, ArchiveFile, Endpoint, ScheduledMessage, Team

# --- the accuracy report's facts -------------------------------------------------------------


def message_list_due_between(*, since: datetime, until: datetime, team_id: int | None = None):
    """The messages the accuracy report counts on the days of [since, until): due in it, where due
    is the later of due_at and created_at (the lifecycle's rule), so a message scheduled in the
    past counts on the day it was accepted, not on a day whose report ran long ago. Filters on
    the message's own columns only (retention/parquet.py reads them through COPY); ``team_id``
    keeps one team's (its endpoints' ids, a subquery)."""
    due_in_range = Q(due_at__gte=since, due_at__lt=until, created_at__lt=until)
    # status IN (every status) lets PostgreSQL range-scan the (status, created_at) index for the
    # few backdated rows instead of reading the whole table (there is no index on created_at alone)
    accepted_in_range = Q(due_at__lt=since, status__in=list(Status), created_at__gte=since, created_at__lt=until)
    messages = ScheduledMessage.objects.filter(due_in_range | accepted_in_range)
    if team_id is not None:
        messages = messages.filter(endpoint_id__in=Endpoint.objects.filter(team_id=team_id).values("id"))
    return messages.order_by()


def archive_file_list(*, first_day: date, last_day: date) -> list[ArchiveFile]:
    """The archive's files of messages due on these days (its list: what a prune committed)."""
    return list(ArchiveFile.objects.filter(day__range=(first_day, last_day)).order_by("day", "path"))


# --- the accuracy report ------------------------------------------------------------------------

TeamIds = Collection[int] | None  # the caller's scope: None = every team (an operator)
ALL = AccuracyReport.ALL
REPORT_DIMENSIONS = ("team", "endpoint", "version", "delivery_mode", "delay_bucket")
GROUP_DIMENSIONS = REPORT_DIMENSIONS[1:]  # within a team
# The slices with rows (the Spark job's grouping sets: accuracy.py's TEAM_ROLLUPS and
# PLATFORM_ROLLUPS, which this module cannot import: that loads pyspark), by the dimensions
# other than team that are not ALL. Platform-wide rows (team ALL) never name an endpoint: two
# teams' endpoints may share a name.
TEAM_SLICES = frozenset(
    map(frozenset, (GROUP_DIMENSIONS, ("endpoint",), ("version",), ("delay_bucket",), ())))
PLATFORM_SLICES = frozenset(map(frozenset, (("version",), ("delay_bucket",), ())))


def _visible(rows: QuerySet, team_ids: TeamIds) -> QuerySet:
    """``rows`` the caller may read (the names of their teams: rows copy names, not ids)."""
    if team_ids is None:
        return rows
    return rows.filter(team__in=Team.objects.filter(id__in=team_ids).values("name")).exclude(team=ALL)


def accuracy_report_slice_exists(*, team: str, dimensions: Collection[str]) -> bool:
    """Whether the job writes rows for this team (or ALL) with these other dimensions chosen."""
    return frozenset(dimensions) in (PLATFORM_SLICES if team == ALL else TEAM_SLICES)


def accuracy_report_get_latest_day(*, team_ids: TeamIds) -> date | None:
    rows = _visible(AccuracyReport.objects.all(), team_ids)
    return rows.order_by("-day").values_list("day", flat=True).first()


def accuracy_report_list_slice(*, first_day: date, last_day: date, team_ids: TeamIds,
                               **dimensions: str) -> list[AccuracyReport]:
    """One row per day for one slice: each dimension (team included) a value, or ALL (the
    default). Only the slices of TEAM_SLICES and PLATFORM_SLICES have rows."""
    selected = {name: dimensions.get(name, ALL) for name in REPORT_DIMENSIONS}
    rows = AccuracyReport.objects.filter(day__range=(first_day, last_day), **selected)
    return list(_visible(rows, team_ids).order_by("day"))


def accuracy_report_list_breakdown(*, day: date, by: str, team: str,
                                   team_ids: TeamIds) -> list[AccuracyReport]:
    """The day's rollup rows of ``team`` by one dimension (per endpoint, per version, per delay
    bucket). Per endpoint with ``team`` ALL: every team's endpoints (each its team's rollup),
    since an endpoint name says nothing across teams."""
    others = {name: ALL for name in GROUP_DIMENSIONS if name != by}
    rows = AccuracyReport.objects.filter(day=day, **others).exclude(**{by: ALL})
    rows = rows.exclude(team=ALL) if team == ALL and by == "endpoint" else rows.filter(team=team)
    return list(_visible(rows, team_ids).order_by("team", by))


def accuracy_report_list_problems(*, first_day: date, last_day: date, team_ids: TeamIds,
                                  team: str | None = None) -> list[AccuracyReport]:
    """Groups (not rollups) with lost, duplicated or early messages, worst first; of one team
    when ``team`` names one."""
    rollup = Q(*((name, ALL) for name in REPORT_DIMENSIONS), _connector=Q.OR)
    groups = AccuracyReport.objects.filter(day__range=(first_day, last_day)).exclude(rollup)
    if team and team != ALL:
        groups = groups.filter(team=team)
    return list(_visible(groups, team_ids).filter(Q(lost__gt=0) | Q(duplicates__gt=0) | Q(early__gt=0))
                .order_by((F("lost") + F("duplicates") + F("early")).desc(), "-day", "team"))


def accuracy_report_list_values(*, dimension: str, team_ids: TeamIds, **where: str) -> list[str]:
    """The values one dimension takes in the rows the caller sees (for filters), ALL excluded;
    ``where``: other dimensions' values (``team="billing-eu"``: that team's endpoints)."""
    rows = _visible(AccuracyReport.objects.filter(**where).exclude(**{dimension: ALL}), team_ids)
    return list(rows.order_by(dimension).values_list(dimension, flat=True).distinct())

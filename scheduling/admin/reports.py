"""The accuracy report in the admin: a read-only, filterable table of AccuracyReport rows with
charts of the same selection above it. Rows come from the nightly job, never from a form.

Everything on the page (table, filter choices, charts, problems) is read in the user's scope: a
team's viewers and up read their teams' rows; operators read every row, the platform-wide ones
(team ``*``) included."""

from __future__ import annotations

from datetime import date, timedelta

from django.contrib import admin
from django.db.models import Q
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from scheduling.admin.base import ControlRoomAdmin, request_caller
from scheduling.core.roles import Action
from scheduling.core.text import has_nul
from scheduling.models import AccuracyReport, Team
from scheduling.reports import accuracy_charts
from scheduling.reports.facts import (
    GROUP_DIMENSIONS,
    TeamIds,
    accuracy_report_get_latest_day,
    accuracy_report_list_breakdown,
    accuracy_report_list_problems,
    accuracy_report_list_slice,
    accuracy_report_list_values,
    accuracy_report_slice_exists,
)

ALL = AccuracyReport.ALL
CHART_DAYS = 14
PROBLEMS_SHOWN = 10


def _scope(request) -> TeamIds:
    """The teams whose rows the user reads (None: every row, an operator's)."""
    return request_caller(request).team_ids(Action.READ)


def _chosen_team(request) -> str | None:
    team = request.GET.get("team")
    return team if team and team != ALL and _storable(team) else None


def _storable(value: str) -> bool:
    """PostgreSQL text holds no NUL: such a value matches no row (and must not reach a query)."""
    return not has_nul(value)


class _DimensionFilter(admin.SimpleListFilter):
    """A dimension's values in the rows the user reads (of the chosen team, if one is), plus
    "all" for the rollup rows where it is ``*``."""

    def lookups(self, request, model_admin):
        where = {"team": team} if (team := _chosen_team(request)) else {}
        values = accuracy_report_list_values(dimension=self.parameter_name, team_ids=_scope(request), **where)
        if self.parameter_name == "delay_bucket":
            values = [b for b in AccuracyReport.DELAY_BUCKETS if b in values]
        return [(ALL, "all (rollup rows)"), *((value, value) for value in values)]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        if not _storable(self.value()):
            return queryset.none()
        return queryset.filter(**{self.parameter_name: self.value()})


class TeamFilter(_DimensionFilter):
    """The user's teams; for operators also "all", the platform-wide rows."""

    title = "team"
    parameter_name = "team"

    def lookups(self, request, model_admin):
        scope = _scope(request)
        values = accuracy_report_list_values(dimension="team", team_ids=scope)
        platform = [(ALL, "all (platform-wide rows)")] if scope is None else []
        return [*platform, *((value, value) for value in values)]


def _dimension_filter(name: str, title: str) -> type[_DimensionFilter]:
    return type(
        f"{name.title().replace('_', '')}Filter",
        (_DimensionFilter,),
        {"parameter_name": name, "title": title},
    )


class ProblemFilter(admin.SimpleListFilter):
    title = "problems"
    parameter_name = "problems"
    CONDITIONS = {
        "any": Q(lost__gt=0) | Q(duplicates__gt=0) | Q(early__gt=0),
        "lost": Q(lost__gt=0),
        "duplicates": Q(duplicates__gt=0),
        "early": Q(early__gt=0),
        "failed": Q(failed__gt=0),
        "in_past": Q(scheduled_in_past__gt=0),
    }

    def lookups(self, request, model_admin):
        return [
            ("any", "lost, duplicates or early"),
            ("lost", "lost"),
            ("duplicates", "duplicates"),
            ("early", "early"),
            ("failed", "failed"),
            ("in_past", "scheduled in the past"),
        ]

    def queryset(self, request, queryset):
        condition = self.CONDITIONS.get(self.value())
        return queryset.filter(condition) if condition is not None else queryset


def _dimension_column(name: str, label: str):
    def column(row):
        return "all" if getattr(row, name) == ALL else getattr(row, name)

    column.__name__, column.short_description, column.admin_order_field = name, label, name
    return column


def _problem_column(name: str):
    """The count, highlighted when non-zero: these are what an operator must look at."""

    def column(row):
        value = getattr(row, name)
        return format_html('<span class="dp-problem">{}</span>', value) if value else value

    column.__name__, column.short_description, column.admin_order_field = name, name, name
    return column


def _ms_column(name: str, label: str):
    def column(row):
        value = getattr(row, name)
        return "–" if value is None else f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"

    column.__name__, column.short_description, column.admin_order_field = name, label, name
    return column


def _iso_day(value: str | None) -> date | None:
    try:
        return date.fromisoformat((value or "")[:10])
    except ValueError:
        return None


def _chart(title: str, draw, *rows_and_args) -> dict:
    # scheduling.reports.charts builds its markup escaped
    return {"title": title, "svg": mark_safe(draw(*rows_and_args, title=title))}


@admin.register(AccuracyReport)
class AccuracyReportAdmin(ControlRoomAdmin):
    list_display = [
        "day_iso",
        _dimension_column("team", "team"),
        _dimension_column("endpoint", "endpoint"),
        _dimension_column("version", "version"),
        _dimension_column("delivery_mode", "mode"),
        _dimension_column("delay_bucket", "delay"),
        "scheduled",
        "delivered",
        "cancelled",
        "failed",
        "expired",
        _problem_column("lost"),
        _problem_column("duplicates"),
        _problem_column("early"),
        "in_flight",
        "in_past",
        "throttled",
        _ms_column("lateness_p50_ms", "p50 ms"),
        _ms_column("lateness_p95_ms", "p95 ms"),
        _ms_column("lateness_p99_ms", "p99 ms"),
        _ms_column("lateness_max_ms", "max ms"),
        _ms_column("throttled_max_ms", "longest wait ms"),
    ]
    list_filter = [
        ("day", admin.DateFieldListFilter),
        TeamFilter,
        _dimension_filter("endpoint", "endpoint"),
        _dimension_filter("version", "topology version"),
        _dimension_filter("delivery_mode", "delivery mode"),
        _dimension_filter("delay_bucket", "delay bucket"),
        ProblemFilter,
    ]
    list_per_page = 100
    team_actions = {"view": Action.READ}  # nobody adds, changes or deletes rows (below)

    @admin.display(description="in past", ordering="scheduled_in_past")
    def in_past(self, row):
        """Asked for a time already gone: delivered at once, lateness counted from acceptance."""
        return row.scheduled_in_past

    @admin.display(description="day", ordering="day")
    def day_iso(self, row):
        return row.day.isoformat()

    def team_id_of(self, obj) -> int | None:
        """Rows copy their team's name; a platform-wide row (``*``) is no team's: operators only."""
        if obj.team == ALL:
            return None
        return Team.objects.filter(name=obj.team).values_list("id", flat=True).first()

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), **self.charts_context(request)})

    def charts_context(self, request) -> dict:
        """Charts of the table's selection, in the user's scope: the day filter's range (else the
        last CHART_DAYS days with reports), the chosen team (else: an operator's platform-wide
        rows, a member's team) and endpoint, version, mode or bucket (else all)."""
        params, scope = request.GET, _scope(request)
        if not all(_storable(params.get(name, "")) for name in ("team", *GROUP_DIMENSIONS)):
            return {"accuracy_charts": [], "accuracy_problems": []}  # a selection no row can match
        last = _iso_day(params.get("day__lt"))
        last = last - timedelta(days=1) if last else accuracy_report_get_latest_day(team_ids=scope)
        if last is None:
            return {"accuracy_charts": [], "accuracy_problems": []}
        first = _iso_day(params.get("day__gte")) or last - timedelta(days=CHART_DAYS - 1)
        chosen = {name: params[name] for name in GROUP_DIMENSIONS if params.get(name)}
        team, team_note = _chart_team(params.get("team"), chosen.get("endpoint"), scope)
        trend = accuracy_report_list_slice(first_day=first, last_day=last, team_ids=scope, team=team,
                                           **chosen)
        day = trend[-1].day if trend else last
        named = ({"team": team} if team != ALL else {}) | chosen
        where = ", ".join(f"{k.replace('_', ' ')} {'all' if v == ALL else v}" for k, v in named.items())
        where = where or "all"
        of_team = "" if team == ALL else f" of team {team}"
        charts = [
            _chart(f"Lateness per day ({where})", accuracy_charts.lateness_by_day, trend),
            _chart(f"Lost, duplicates, early per day ({where})", accuracy_charts.problems_by_day, trend),
            _chart(
                f"Lateness per endpoint{of_team}, {day}",
                accuracy_charts.lateness_by,
                accuracy_report_list_breakdown(day=day, by="endpoint", team=team, team_ids=scope),
                "endpoint",
            ),
            _chart(
                f"Lateness per delay bucket{of_team}, {day}",
                accuracy_charts.lateness_by,
                accuracy_report_list_breakdown(day=day, by="delay_bucket", team=team, team_ids=scope),
                "delay_bucket",
            ),
        ]
        problems = accuracy_report_list_problems(first_day=first, last_day=last, team_ids=scope,
                                                 team=_chosen_team(request))
        notes = [team_note]
        picked = {name for name, value in chosen.items() if value != ALL}
        if not trend and not accuracy_report_slice_exists(team=team, dimensions=picked):
            notes.append(PLATFORM_SLICE_NOTE if team == ALL else TEAM_SLICE_NOTE)
        return {
            "accuracy_charts": charts,
            "accuracy_problems": problems[:PROBLEMS_SHOWN],
            "accuracy_problems_total": len(problems),
            "accuracy_range": (first, last),
            "accuracy_slice_note": " ".join(filter(None, notes)),
        }


TEAM_SLICE_NOTE = ("A team's report has per-day rows by endpoint, version or delay bucket alone, or by all "
                   "four: pick one or all four for the trend.")
PLATFORM_SLICE_NOTE = ("The platform-wide rows (team all) are by version or delay bucket alone: pick one, or "
                       "a team, for the trend.")


def _chart_team(team: str | None, endpoint: str | None, scope: TeamIds) -> tuple[str, str]:
    """The team the charts show, and a note when the user has to pick it: the chosen one; else,
    for an endpoint, the team that has it (endpoint names are unique only within a team); else
    an operator's platform-wide rows (ALL), or the user's team."""
    if team:
        return team, ""
    if endpoint and endpoint != ALL:
        candidates = accuracy_report_list_values(dimension="team", team_ids=scope, endpoint=endpoint)
        what = f"several teams have an endpoint {endpoint} ({', '.join(candidates)})"
    elif scope is None:
        return ALL, ""
    else:
        candidates = accuracy_report_list_values(dimension="team", team_ids=scope)
        what = f"you read the reports of several teams ({', '.join(candidates)})"
    if len(candidates) <= 1:
        return (candidates[0] if candidates else ALL), ""
    return candidates[0], f"The charts show team {candidates[0]}: {what}; pick one with the team filter."

"""The accuracy report in the admin: a read-only, filterable table of AccuracyReport rows with
charts of the same selection above it. Rows come from the nightly job, never from a form."""

from __future__ import annotations

from datetime import date, timedelta

from django.contrib import admin
from django.db.models import Q
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from ..models import AccuracyReport
from ..reports import accuracy_charts
from ..reports.facts import (
    REPORT_DIMENSIONS,
    accuracy_report_get_latest_day,
    accuracy_report_list_breakdown,
    accuracy_report_list_problems,
    accuracy_report_list_slice,
    accuracy_report_list_values,
)

ALL = AccuracyReport.ALL
CHART_DAYS = 14
PROBLEMS_SHOWN = 10


class _DimensionFilter(admin.SimpleListFilter):
    """A dimension's values, plus "all" for the rollup rows where it is ``*``."""

    def lookups(self, request, model_admin):
        values = accuracy_report_list_values(dimension=self.parameter_name)
        if self.parameter_name == "delay_bucket":
            values = [b for b in AccuracyReport.DELAY_BUCKETS if b in values]
        return [(ALL, "all (rollup rows)"), *((value, value) for value in values)]

    def queryset(self, request, queryset):
        return queryset.filter(**{self.parameter_name: self.value()}) if self.value() else queryset


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
class AccuracyReportAdmin(admin.ModelAdmin):
    list_display = [
        "day_iso",
        _dimension_column("endpoint", "endpoint"),
        _dimension_column("version", "version"),
        _dimension_column("delivery_mode", "mode"),
        _dimension_column("delay_bucket", "delay"),
        "scheduled",
        "delivered",
        "cancelled",
        "failed",
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
        _dimension_filter("endpoint", "endpoint"),
        _dimension_filter("version", "topology version"),
        _dimension_filter("delivery_mode", "delivery mode"),
        _dimension_filter("delay_bucket", "delay bucket"),
        ProblemFilter,
    ]
    list_per_page = 100

    @admin.display(description="in past", ordering="scheduled_in_past")
    def in_past(self, row):
        """Asked for a time already gone: delivered at once, lateness counted from acceptance."""
        return row.scheduled_in_past

    @admin.display(description="day", ordering="day")
    def day_iso(self, row):
        return row.day.isoformat()

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), **self.charts_context(request.GET)})

    def charts_context(self, params) -> dict:
        """Charts of the table's selection: the day filter's range (else the last CHART_DAYS days
        with reports) and the chosen endpoint, version, mode or bucket (else all)."""
        last = _iso_day(params.get("day__lt"))
        last = last - timedelta(days=1) if last else accuracy_report_get_latest_day()
        if last is None:
            return {"accuracy_charts": [], "accuracy_problems": []}
        first = _iso_day(params.get("day__gte")) or last - timedelta(days=CHART_DAYS - 1)
        chosen = {name: params[name] for name in REPORT_DIMENSIONS if params.get(name)}
        trend = accuracy_report_list_slice(first_day=first, last_day=last, **chosen)
        day = trend[-1].day if trend else last
        where = (
            ", ".join(f"{k.replace('_', ' ')} {'all' if v == ALL else v}" for k, v in chosen.items()) or "all"
        )
        charts = [
            _chart(f"Lateness per day ({where})", accuracy_charts.lateness_by_day, trend),
            _chart(f"Lost, duplicates, early per day ({where})", accuracy_charts.problems_by_day, trend),
            _chart(
                f"Lateness per endpoint, {day}",
                accuracy_charts.lateness_by,
                accuracy_report_list_breakdown(day=day, by="endpoint"),
                "endpoint",
            ),
            _chart(
                f"Lateness per delay bucket, {day}",
                accuracy_charts.lateness_by,
                accuracy_report_list_breakdown(day=day, by="delay_bucket"),
                "delay_bucket",
            ),
        ]
        problems = accuracy_report_list_problems(first_day=first, last_day=last)
        return {
            "accuracy_charts": charts,
            "accuracy_problems": problems[:PROBLEMS_SHOWN],
            "accuracy_problems_total": len(problems),
            "accuracy_range": (first, last),
            "accuracy_slice_note": ""
            if trend or len(chosen) in (0, 1, 4)
            else "The report has per-day rows for one dimension, or for all four; "
            "pick one or all four for the trend.",
        }

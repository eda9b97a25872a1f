"""The control room's dashboard: counts by status, what is due soon, recent lateness and
failures, and a 24-hour lateness chart (server-rendered SVG; nothing loads from elsewhere)."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.utils.safestring import mark_safe

from scheduling.admin.base import request_caller
from scheduling.core.roles import Action
from scheduling.messages.dashboard import DASHBOARD_COUNT_CAP, dashboard_get
from scheduling.reports import charts

# The admin index links here (a box above the app list).
admin.site.index_template = "admin/scheduling/index.html"


def lateness_chart(hourly) -> str:
    labels = [hour.strftime("%H:00") for hour, _ in hourly]
    series = [
        charts.Series("p50", tuple(zip(labels, (s.p50_ms for _, s in hourly)))),
        charts.Series("p99", tuple(zip(labels, (s.p99_ms for _, s in hourly)))),
    ]
    return charts.line_chart(series, title="Lateness of deliveries per hour, last 24 hours (UTC)", unit="ms")


def deliveries_chart(hourly) -> str:
    points = tuple((hour.strftime("%H:00"), float(s.count)) for hour, s in hourly)
    return charts.bar_chart([charts.Series("delivered", points)], title="Deliveries per hour, last 24 hours (UTC)")


def dashboard_view(model_admin: admin.ModelAdmin, request):
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    board = dashboard_get(team_ids=request_caller(request).team_ids(Action.READ))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Delay platform dashboard",
        "opts": model_admin.opts,
        "board": board,
        "cap": f"{DASHBOARD_COUNT_CAP:,}",
        "lateness_chart": mark_safe(lateness_chart(board.hourly)),  # charts escape their own text
        "deliveries_chart": mark_safe(deliveries_chart(board.hourly)),
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/scheduling/dashboard.html", context)

"""The admin's accuracy charts: AccuracyReport rows in, inline SVG out (scheduling.charts)."""

from __future__ import annotations

from collections.abc import Sequence

from scheduling.models import AccuracyReport
from scheduling.reports.charts import Series, bar_chart, line_chart

PERCENTILES = (("p50", "lateness_p50_ms"), ("p95", "lateness_p95_ms"), ("p99", "lateness_p99_ms"))
PROBLEMS = (("lost", "lost"), ("duplicates", "duplicates"), ("early", "early"))
BUCKET_ORDER = {label: i for i, label in enumerate(AccuracyReport.DELAY_BUCKETS)}


def _series(rows: Sequence[AccuracyReport], label, fields) -> list[Series]:
    return [Series(name, tuple((label(row), getattr(row, field)) for row in rows)) for name, field in fields]


def lateness_by_day(rows: Sequence[AccuracyReport], *, title: str) -> str:
    return line_chart(
        _series(rows, lambda row: row.day.strftime("%m-%d"), PERCENTILES), title=title, unit="ms"
    )


def problems_by_day(rows: Sequence[AccuracyReport], *, title: str) -> str:
    return bar_chart(_series(rows, lambda row: row.day.strftime("%m-%d"), PROBLEMS), title=title)


def lateness_by(rows: Sequence[AccuracyReport], dimension: str, *, title: str) -> str:
    """Bars per endpoint, version or delay bucket (buckets in delay order, not alphabetical).
    Endpoints of several teams are named ``team/endpoint``: two teams may each have a billing."""
    if dimension == "delay_bucket":
        rows = sorted(rows, key=lambda row: BUCKET_ORDER.get(row.delay_bucket, len(BUCKET_ORDER)))
    several_teams = dimension == "endpoint" and len({row.team for row in rows}) > 1

    def label(row):
        return f"{row.team}/{row.endpoint}" if several_teams else getattr(row, dimension)

    return bar_chart(_series(rows, label, PERCENTILES), title=title, unit="ms")

"""Small server-rendered SVG charts for the admin (nothing is loaded from outside the machine).

Pure functions: data in, SVG markup out (already escaped, safe to mark_safe in a template).
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

PALETTE = ("#2f6fb0", "#d9822b", "#3a9b5c", "#c23b3b", "#7b5ea7", "#8c6d31", "#5f7f8f")


@dataclass(frozen=True)
class Series:
    name: str
    points: tuple[tuple[str, float | None], ...]  # (x label, y); None leaves a gap


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    magnitude = 10 ** len(str(int(value))) / 10
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return value


def _frame(width: int, height: int, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dp-chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>"
        f'<style>.dp-chart text{{font:11px sans-serif;fill:#444}}</style>{"".join(body)}</svg>'
    )


def _axes(width, height, pad, y_max, unit, labels) -> list[str]:
    left, right, top, bottom = pad
    plot_h = height - top - bottom
    parts = []
    for i in range(5):
        value = y_max * i / 4
        y = top + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{value:g}{escape(unit)}</text>')
    step = max(1, len(labels) // 8)
    plot_w = width - left - right
    for i, label in enumerate(labels):
        if i % step == 0:
            x = left + (plot_w * (i + 0.5) / len(labels))
            parts.append(f'<text x="{x:.1f}" y="{height - bottom + 14}" text-anchor="middle">{escape(str(label))}</text>')
    return parts


def _legend(series: list[Series], x: int, y: int) -> list[str]:
    parts = []
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        parts.append(f'<rect x="{x + i * 110}" y="{y - 9}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x + i * 110 + 14}" y="{y}">{escape(s.name)}</text>')
    return parts


PAD = (56, 12, 24, 22)  # left, right, top, bottom


def _no_data(series: list[Series], width: int, height: int, title: str) -> str | None:
    """The whole chart when there is nothing to draw, else None."""
    if series and series[0].points and any(y is not None for s in series for _, y in s.points):
        return None
    return _frame(width, height, title, [f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text>'])


def _y_max(series: list[Series]) -> float:
    return _nice_max(max(y for s in series for _, y in s.points if y is not None))


@dataclass(frozen=True)
class _Plot:
    """Where a chart's data goes: the x labels, the plot area inside the padding, the y scale."""

    labels: list[str]
    left: float
    top: float
    width: float
    height: float
    y_max: float

    def y(self, value: float) -> float:
        """The height of a value in the plot area (capped at the top)."""
        return self.height * min(value, self.y_max) / self.y_max


def _plot(series: list[Series], width: int, height: int, unit: str) -> tuple[_Plot, list[str]]:
    """The plot area and the chart's body so far: axes and legend."""
    labels = [label for label, _ in series[0].points]
    left, right, top, bottom = PAD
    plot = _Plot(labels, left, top, width - left - right, height - top - bottom, _y_max(series))
    return plot, _axes(width, height, PAD, plot.y_max, unit, labels) + _legend(series, left, 14)


def line_chart(series: list[Series], *, title: str, unit: str = "", width: int = 640, height: int = 240) -> str:
    """One line per series over shared x labels (the first series' labels)."""
    if empty := _no_data(series, width, height, title):
        return empty
    plot, body = _plot(series, width, height, unit)
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        segments, current = [], []
        for j, (_, y) in enumerate(s.points):
            if y is None:
                if current:
                    segments.append(current)
                current = []
                continue
            x = plot.left + plot.width * (j + 0.5) / len(plot.labels)
            current.append(f"{x:.1f},{plot.top + plot.height - plot.y(y):.1f}")
        if current:
            segments.append(current)
        for segment in segments:
            body.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(segment)}"/>')
            for point in segment:
                px, py = point.split(",")
                body.append(f'<circle cx="{px}" cy="{py}" r="2.5" fill="{color}"/>')
    return _frame(width, height, title, body)


def bar_chart(series: list[Series], *, title: str, unit: str = "", width: int = 640, height: int = 240) -> str:
    """Grouped bars: one group per x label, one bar per series."""
    if empty := _no_data(series, width, height, title):
        return empty
    plot, body = _plot(series, width, height, unit)
    group_w = plot.width / len(plot.labels)
    bar_w = group_w * 0.8 / len(series)
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        for j, (label, y) in enumerate(s.points):
            if y is None:
                continue
            h = plot.y(y)
            x = plot.left + group_w * j + group_w * 0.1 + bar_w * i
            body.append(
                f'<rect x="{x:.1f}" y="{plot.top + plot.height - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'fill="{color}"><title>{escape(s.name)} {escape(str(label))}: {y:g}{escape(unit)}</title></rect>'
            )
    return _frame(width, height, title, body)

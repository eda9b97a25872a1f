"""Small server-rendered SVG charts for the admin (nothing is loaded from outside the machine).

Pure functions: data in, SVG markup out (already escaped, safe to mark_safe in a template).
The y axis has round ticks labelled for people: ``unit="ms"`` marks durations, shown in ms, s,
min or h as the range grows ("250 ms", "1.5 s", "2 min", "3 h"), never "1e+08"; the left
margin grows with the longest label so none is clipped.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from decimal import Decimal
from html import escape

PALETTE = ("#2f6fb0", "#d9822b", "#3a9b5c", "#c23b3b", "#7b5ea7", "#8c6d31", "#5f7f8f")


@dataclass(frozen=True)
class Series:
    name: str
    points: tuple[tuple[str, float | None], ...]  # (x label, y); None leaves a gap


# --- the y axis: round ticks, readable labels -----------------------------------------------

MAX_INTERVALS = 5
SECOND, MINUTE, HOUR = 1_000, 60_000, 3_600_000
# (name, size in ms, used from, round steps in that unit), smallest unit first: an axis is
# labelled in the largest unit its range reaches (1.5 s reads "1.5 s", not "1,500 ms"; minutes
# and hours from two of them, so 90 s reads "90 s", not "1.5 min")
DURATION_UNITS = (
    ("ms", 1, 0, (0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 25, 50, 100, 200, 250)),
    ("s", SECOND, SECOND, (0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, 15, 20, 30)),
    ("min", MINUTE, 2 * MINUTE, (0.5, 1, 2, 5, 10, 15, 20, 30)),
    ("h", HOUR, 2 * HOUR, (0.5, 1, 2, 3, 6, 12)),  # then 20, 25, 50, 100, ... hours
)


def _decimal_steps(smallest: float):
    """1, 2, 2.5, 5 times powers of ten, from the decade of ``smallest`` up."""
    exponent = math.floor(math.log10(smallest)) if smallest > 0 else 0
    while True:
        for mantissa in (1, 2, 2.5, 5):
            yield mantissa * 10.0 ** exponent
        exponent += 1


def _duration_steps(magnitude_ms: float):
    """(name, size, steps in that unit) for an axis reaching ``magnitude_ms``."""
    name, size, _, steps = next(u for u in reversed(DURATION_UNITS) if magnitude_ms >= u[2])
    return name, size, itertools.chain(steps, (s for s in _decimal_steps(steps[-1]) if s > steps[-1]))


@dataclass(frozen=True)
class Axis:
    """The y range and its ticks, each (value, label)."""

    low: float
    high: float
    ticks: tuple[tuple[float, str], ...]


def _number(value: float, step: float) -> str:
    """Plain digits with thousands separators and as many decimals as the step has."""
    decimals = max(0, -Decimal(repr(round(step, 6))).normalize().as_tuple().exponent)
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def y_axis(low: float, high: float, *, unit: str = "", integers: bool = False) -> Axis:
    """Round ticks from at most 0 up to at least ``high`` (down to ``low`` when negative), at most
    MAX_INTERVALS of them, the smallest step that fits. Durations (unit "ms") step in round
    amounts of one unit, and every label of the axis uses that unit. ``integers``: counts, so
    no step below 1."""
    low, high = min(0.0, low), max(0.0, high)
    durations = unit.strip() == "ms"
    smallest = max((high - low) / MAX_INTERVALS, 1 if integers or high == low else 0)
    if durations:
        name, size, steps = _duration_steps(max(-low, high))
    else:
        name, size, steps = unit, 1, _decimal_steps(smallest)
    for step in (s * size for s in steps):
        first, last = math.floor(low / step), math.ceil(high / step)
        if step >= smallest and last - first <= MAX_INTERVALS:
            break
    last = max(last, first + 1)  # at least one interval, even for all-zero data
    ticks = []
    for i in range(first, last + 1):
        value = i * step
        digits = _number(value / size, step / size)
        ticks.append((value, f"{digits} {name}" if durations else f"{digits}{name}"))
    return Axis(first * step, last * step, tuple(ticks))


def value_label(value: float, unit: str = "") -> str:
    """A data value in full (tooltips): "88,368,428 ms", "12.5 ms", "3"."""
    text = f"{value:,.3f}".rstrip("0").rstrip(".")
    return f"{text} ms" if unit.strip() == "ms" else f"{text}{unit}"


CHAR_PX = 6.6  # average width of an 11px sans-serif character, generous for digits


def _frame(width: int, height: int, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dp-chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>"
        f'<style>.dp-chart text{{font:11px sans-serif;fill:#444}}</style>{"".join(body)}</svg>'
    )


def _axes(width, height, pad, axis: Axis, labels) -> list[str]:
    left, right, top, bottom = pad
    plot_h = height - top - bottom
    parts = []
    for value, label in axis.ticks:
        y = top + plot_h - plot_h * (value - axis.low) / (axis.high - axis.low)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{escape(label)}</text>')
    step = max(1, len(labels) // 8)
    plot_w = width - left - right
    for i, label in enumerate(labels):
        if i % step == 0:
            half = len(str(label)) * CHAR_PX / 2  # kept inside the viewBox, however long
            x = min(max(left + (plot_w * (i + 0.5) / len(labels)), half), width - half)
            parts.append(f'<text x="{x:.1f}" y="{height - bottom + 14}" text-anchor="middle">{escape(str(label))}</text>')
    return parts


def _legend(series: list[Series], x: int, y: int) -> list[str]:
    parts = []
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        parts.append(f'<rect x="{x + i * 110}" y="{y - 9}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x + i * 110 + 14}" y="{y}">{escape(s.name)}</text>')
    return parts


PAD = (56, 12, 24, 22)  # left (at least; grows with the y labels), right, top, bottom


def _no_data(series: list[Series], width: int, height: int, title: str) -> str | None:
    """The whole chart when there is nothing to draw, else None."""
    if series and series[0].points and any(y is not None for s in series for _, y in s.points):
        return None
    return _frame(width, height, title, [f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text>'])


def _y_axis(series: list[Series], unit: str) -> Axis:
    values = [y for s in series for _, y in s.points if y is not None]
    integers = unit.strip() != "ms" and all(float(y).is_integer() for y in values)
    return y_axis(min(values), max(values), unit=unit, integers=integers)


@dataclass(frozen=True)
class _Plot:
    """Where a chart's data goes: the x labels, the plot area inside the padding, the y scale."""

    labels: list[str]
    left: float
    top: float
    width: float
    height: float
    axis: Axis

    def y(self, value: float) -> float:
        """The height of a value above the bottom of the plot area (kept inside it)."""
        low, high = self.axis.low, self.axis.high
        return self.height * (min(max(value, low), high) - low) / (high - low)

    @property
    def zero(self) -> float:
        """The height of 0, where bars start."""
        return self.y(0)


def _plot(series: list[Series], width: int, height: int, unit: str) -> tuple[_Plot, list[str]]:
    """The plot area and the chart's body so far: axes and legend."""
    labels = [label for label, _ in series[0].points]
    axis = _y_axis(series, unit)
    longest = max(len(label) for _, label in axis.ticks)
    pad = (max(PAD[0], math.ceil(longest * CHAR_PX) + 10), *PAD[1:])
    left, right, top, bottom = pad
    plot = _Plot(labels, left, top, width - left - right, height - top - bottom, axis)
    return plot, _axes(width, height, pad, axis, labels) + _legend(series, left, 14)


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
            lower, upper = sorted((plot.y(y), plot.zero))  # heights above the plot's bottom
            x = plot.left + group_w * j + group_w * 0.1 + bar_w * i
            body.append(
                f'<rect x="{x:.1f}" y="{plot.top + plot.height - upper:.1f}" width="{bar_w:.1f}" '
                f'height="{upper - lower:.1f}" fill="{color}"><title>{escape(s.name)} {escape(str(label))}: '
                f'{escape(value_label(y, unit))}</title></rect>'
            )
    return _frame(width, height, title, body)

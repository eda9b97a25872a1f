"""The SVG charts are well-formed, escaped, place values proportionally, and label their axes
in readable units inside the chart."""

import xml.etree.ElementTree as ET

import pytest

from scheduling.reports.charts import CHAR_PX, Series, bar_chart, line_chart, y_axis

NS = "{http://www.w3.org/2000/svg}"


def test_line_chart_is_valid_svg_with_one_polyline_per_series():
    svg = line_chart([Series("p50", (("00", 1), ("01", 2))), Series("p99", (("00", 10), ("01", 20)))],
                     title="Lateness <ms>", unit=" ms")
    root = ET.fromstring(svg)
    assert root.find(f"{NS}title").text == "Lateness <ms>"
    assert len(root.findall(f"{NS}polyline")) == 2
    assert "&lt;ms&gt;" in svg


def test_gaps_split_the_line():
    svg = line_chart([Series("x", (("a", 1), ("b", None), ("c", 3)))], title="t")
    assert len(ET.fromstring(svg).findall(f"{NS}polyline")) == 2


def test_bars_are_proportional_to_values():
    svg = bar_chart([Series("lost", (("a", 5), ("b", 10)))], title="t", height=240)
    heights = [float(r.get("height")) for r in ET.fromstring(svg).findall(f"{NS}rect") if r.find(f"{NS}title") is not None]
    assert heights[1] == 2 * heights[0]


def test_empty_data_says_so():
    assert "no data" in line_chart([], title="t") and "no data" in bar_chart([Series("x", ())], title="t")


# (lowest, highest value in ms) -> the y axis' tick labels
DURATION_AXES = [
    ((0, 0), ["0 ms", "1 ms"]),
    ((0, 0.4), ["0 ms", "0.1 ms", "0.2 ms", "0.3 ms", "0.4 ms"]),
    ((0, 50), ["0 ms", "10 ms", "20 ms", "30 ms", "40 ms", "50 ms"]),
    ((0, 233), ["0 ms", "50 ms", "100 ms", "150 ms", "200 ms", "250 ms"]),
    ((-3, 233), ["-100 ms", "0 ms", "100 ms", "200 ms", "300 ms"]),
    ((0, 1_500), ["0 s", "0.5 s", "1 s", "1.5 s"]),
    ((0, 7_500), ["0 s", "2 s", "4 s", "6 s", "8 s"]),
    ((0, 90_000), ["0 s", "20 s", "40 s", "60 s", "80 s", "100 s"]),
    ((0, 250_000), ["0 min", "1 min", "2 min", "3 min", "4 min", "5 min"]),
    ((0, 5_400_000), ["0 min", "20 min", "40 min", "60 min", "80 min", "100 min"]),
    ((0, 10_000_000), ["0 h", "1 h", "2 h", "3 h"]),
    ((0, 88_368_428), ["0 h", "6 h", "12 h", "18 h", "24 h", "30 h"]),  # the p99
    ((0, 268_435_455_000), ["0 h", "20,000 h", "40,000 h", "60,000 h", "80,000 h"]),  # 8.5 years
]


@pytest.mark.parametrize(("values", "labels"), DURATION_AXES)
def test_duration_ticks_are_round_and_in_a_readable_unit(values, labels):
    axis = y_axis(*values, unit="ms")
    assert [label for _, label in axis.ticks] == labels
    assert axis.low <= min(values) and axis.high >= max(values)


@pytest.mark.parametrize(("high", "integers", "labels"), [
    (3, True, ["0", "1", "2", "3"]),
    (0.37, False, ["0", "0.1", "0.2", "0.3", "0.4"]),
    (1_234_567, True, ["0", "250,000", "500,000", "750,000", "1,000,000", "1,250,000"]),
])
def test_count_ticks_are_plain_numbers(high, integers, labels):
    assert [label for _, label in y_axis(0, high, integers=integers).ticks] == labels


def texts(svg: str) -> list[ET.Element]:
    return [t for t in ET.fromstring(svg).iter(f"{NS}text")]


def assert_inside_the_view_box(svg: str) -> None:
    """Each label's estimated extent (CHAR_PX per character) lies within the viewBox."""
    root = ET.fromstring(svg)
    _, _, width, height = (float(v) for v in root.get("viewBox").split())
    for text in texts(svg):
        x, extent = float(text.get("x")), len(text.text) * CHAR_PX
        start = {"end": x - extent, "middle": x - extent / 2}.get(text.get("text-anchor"), x)
        assert 0 <= start and start + extent <= width and 0 <= float(text.get("y")) <= height, text.text


@pytest.mark.parametrize("p99_ms", [50, 1_500, 250_000, 88_368_428, 268_435_455_000])
def test_lateness_chart_labels_have_units_no_exponent_and_fit(p99_ms):
    hours = [f"{h:02}:00" for h in range(24)]
    svg = line_chart([Series("p50", tuple((h, 4) for h in hours)), Series("p99", tuple((h, p99_ms) for h in hours))],
                     title="Lateness", unit="ms")
    labels = [t.text for t in texts(svg) if t.get("text-anchor") == "end"]
    assert len(labels) >= 3 and "e+" not in svg and "e-" not in "".join(labels)
    unit = {50: "ms", 1_500: "s", 250_000: "min"}.get(p99_ms, "h")
    assert all(label.endswith(f" {unit}") for label in labels), labels
    assert_inside_the_view_box(svg)


def test_long_x_labels_and_negative_bars_stay_inside_the_chart():
    svg = bar_chart([Series("p50", (("a-very-long-endpoint-name.eu-west-1.billing", -40.0), ("b", 88_368_428.0)))],
                    title="t", unit="ms", width=320)
    assert_inside_the_view_box(svg)
    bars = [r for r in ET.fromstring(svg).iter(f"{NS}rect") if r.find(f"{NS}title") is not None]
    assert [r.find(f"{NS}title").text for r in bars] == [
        "p50 a-very-long-endpoint-name.eu-west-1.billing: -40 ms", "p50 b: 88,368,428 ms"]
    assert all(float(r.get("height")) >= 0 for r in bars)

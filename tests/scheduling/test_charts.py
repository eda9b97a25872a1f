"""The SVG charts are well-formed, escaped, and place values proportionally."""

import xml.etree.ElementTree as ET

from scheduling.charts import Series, bar_chart, line_chart

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

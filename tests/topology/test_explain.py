"""The path table, compared cell by cell with the seeds' example (4 levels, 10 s)."""

from topology.cascade import V2, V3
from topology.explain import (
    DIRECT_HEADERS,
    HEADERS,
    describe_route,
    explain_rows,
    format_duration,
    headers,
    markdown_table,
)

SEED_TABLE = [
    ("Level 03", "**1**.0.1.0.destination", "`1`", "Level 03 Queue", "8 seconds", "Level 02 Exchange"),
    ("Level 02", "1.**0**.1.0.destination", "`0`", "Level 01 Exchange", "-", "-"),
    ("Level 01", "1.0.**1**.0.destination", "`1`", "Level 01 Queue", "2 seconds", "Level 00 Exchange"),
    ("Level 00", "1.0.1.**0**.destination", "`0`", "Delivery Exchange", "-", "-"),
    ("Delivery Exchange", "1.0.1.0.**destination**", "`destination`", "`destination`", "-", "-"),
]


def test_seed_example_rows():
    assert explain_rows(V2.with_(levels=4), 10, "destination") == SEED_TABLE


def test_zero_delay_goes_straight_to_delivery():
    assert explain_rows(V2, 0, "billing") == [
        ("Delivery Exchange", "0." * 28 + "**billing**", "`billing`", "`billing`", "-", "-")
    ]


def test_one_second_uses_level_zero_only():
    rows = explain_rows(V2, 1, "b")
    assert [r[0] for r in rows] == ["Level 00", "Delivery Exchange"]
    assert rows[0][3:] == ("Level 00 Queue", "1 second", "Delivery Exchange")


def test_durations_read_like_the_seeds():
    assert format_duration(8000) == "8 seconds"
    assert format_duration(1000) == "1 second"
    assert format_duration(2**27 * 1000) == "134217728 seconds (≈ 4.25 years)"
    assert format_duration(2**26 * 1000) == "67108864 seconds (≈ 2.13 years)"


def test_markdown_table_aligns_columns():
    text = markdown_table(HEADERS, SEED_TABLE)
    lines = text.splitlines()
    assert len(lines) == 7 and len({len(line) for line in lines}) == 1
    assert lines[2].startswith("| Level 03 ")


V3_TABLE = [
    ("Level 03", "`bit:03`", "Level 03 Queue", "CC has `bit:03`", "8 seconds", "Level 02 Exchange"),
    ("Level 02", "`bit:02`", "Level 01 Exchange", "no `bit:02`: alternate exchange", "-", "-"),
    ("Level 01", "`bit:01`", "Level 01 Queue", "CC has `bit:01`", "2 seconds", "Level 00 Exchange"),
    ("Level 00", "`bit:00`", "Delivery Exchange", "no `bit:00`: alternate exchange", "-", "-"),
    ("Delivery Exchange", "`a.b`", "`a.b`", "routing key `a.b`", "-", "-"),
]


def test_v3_rows_say_which_exchange_keeps_or_passes_the_message_and_why():
    v3 = V3.with_(levels=4)
    assert headers(v3) == DIRECT_HEADERS and headers(V2) == HEADERS
    assert explain_rows(v3, 10, "a.b") == V3_TABLE
    assert describe_route(v3, 10, "a.b") == "published to dp.v3.delay-level-03 with routing key a.b and CC bit:03, bit:01"
    assert describe_route(V2.with_(levels=4), 10, "d") == "published to dp.v2.delay-level-03 with routing key 1.0.1.0.d"


def test_v3_zero_delay_is_the_delivery_exchange_alone():
    assert explain_rows(V3, 0, "billing") == [("Delivery Exchange", "`billing`", "`billing`", "routing key `billing`", "-", "-")]

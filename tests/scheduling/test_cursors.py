"""The lists' cursors: where a page ends, opaque in the URL, and any other text is the first page."""

import uuid
from datetime import datetime, timezone

import pytest

from scheduling.cursors import AFTER, BEFORE, Position, decode_cursor, encode_cursor

AT = datetime(2026, 11, 24, 1, 2, 3, 456789, tzinfo=timezone.utc)


@pytest.mark.parametrize("direction", [AFTER, BEFORE])
def test_a_cursor_names_its_direction_and_position_to_the_microsecond(direction):
    position = Position(AT, uuid.uuid4())
    text = encode_cursor(direction, position)
    assert decode_cursor(text) == (direction, position) and "=" not in text and "&" not in text


@pytest.mark.parametrize("text", ["", "x", "!!!", encode_cursor("sideways", Position(AT, uuid.uuid4())),
                                  encode_cursor(AFTER, Position(AT.replace(tzinfo=None), uuid.uuid4())),
                                  "WyJhZnRlciIsIjIwMjYiXQ"])
def test_anything_else_is_no_cursor(text):
    assert decode_cursor(text) is None

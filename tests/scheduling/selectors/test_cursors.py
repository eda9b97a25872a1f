"""The lists' cursors: where a page ends, opaque in the URL, and any other text is the first page."""

import uuid
from datetime import datetime, timezone

import pytest

from scheduling.selectors.cursors import AFTER, BEFORE, Position, cursor_decode, cursor_encode

AT = datetime(2026, 11, 24, 1, 2, 3, 456789, tzinfo=timezone.utc)


@pytest.mark.parametrize("direction", [AFTER, BEFORE])
def test_a_cursor_names_its_direction_and_position_to_the_microsecond(direction):
    position = Position(AT, uuid.uuid4())
    text = cursor_encode(direction=direction, position=position)
    assert cursor_decode(text=text) == (direction, position) and "=" not in text and "&" not in text


@pytest.mark.parametrize("text", ["", "x", "!!!", cursor_encode(direction="sideways", position=Position(AT, uuid.uuid4())),
                                  cursor_encode(direction=AFTER, position=Position(AT.replace(tzinfo=None), uuid.uuid4())),
                                  "WyJhZnRlciIsIjIwMjYiXQ"])
def test_anything_else_is_no_cursor(text):
    assert cursor_decode(text=text) is None

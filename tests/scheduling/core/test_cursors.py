"""The lists' cursors: where a page ends, opaque in the URL. No cursor is the first page; any
other text is refused with the reason (it was read as the first page, and one nested a few
thousand deep raised RecursionError: a 500)."""

import base64
import json
import sys
import uuid
from datetime import datetime, timezone

import pytest

from scheduling.core.cursors import (
    AFTER,
    BEFORE,
    MAX_LENGTH,
    MalformedCursor,
    Position,
    cursor_decode,
    cursor_encode,
)

AT = datetime(2026, 11, 24, 1, 2, 3, 456789, tzinfo=timezone.utc)
ID = uuid.UUID("0d7c4a1e-8a1f-4a3e-9c1b-2f3d4e5f6a7b")


def encoded(value) -> str:
    """Text as a cursor would carry it: JSON (or raw bytes), base64url, unpadded."""
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize("direction", [AFTER, BEFORE])
def test_a_cursor_names_its_direction_and_position_to_the_microsecond(direction):
    position = Position(AT, uuid.uuid4())
    text = cursor_encode(direction=direction, position=position)
    assert cursor_decode(text=text) == (direction, position) and "=" not in text and "&" not in text
    assert len(text) < 150  # far from the limit


def test_no_cursor_is_the_first_page():
    assert cursor_decode(text="") is None


MALFORMED = {
    "garbage": ("x", "does not decode"),
    "punctuation": ("!!!", "is not base64url"),
    "padding": (cursor_encode(direction=AFTER, position=Position(AT, ID)) + "==", "is not base64url"),
    "overlong": ("A" * (MAX_LENGTH + 1), f"longer than {MAX_LENGTH} characters"),
    "nested a few thousand deep": (encoded(b"[" * 3000), f"longer than {MAX_LENGTH} characters"),
    "nested as deep as fits": (encoded(b"[" * 380), "does not decode"),
    "nested and closed": (encoded(b"[" * 190 + b"]" * 190), "is not [direction, time, id]"),
    "not UTF-8": (encoded(b"\xff\xfe\xfa"), "does not decode"),
    "an object": (encoded({"direction": AFTER}), "is not [direction, time, id]"),
    "two fields": (encoded([AFTER, AT.isoformat()]), "is not [direction, time, id]"),
    "four fields": (encoded([AFTER, AT.isoformat(), str(ID), 1]), "is not [direction, time, id]"),
    "a number for the time": (encoded([AFTER, 1, str(ID)]), "is not [direction, time, id]"),
    "a string": (encoded("after"), "is not [direction, time, id]"),
    "sideways": (cursor_encode(direction="sideways", position=Position(AT, ID)), "direction other than"),
    "naive date-time": (cursor_encode(direction=AFTER, position=Position(AT.replace(tzinfo=None), ID)),
                        "without a UTC offset"),
    "not a date-time": (encoded([AFTER, "yesterday", str(ID)]), "ISO 8601 date-time"),
    "a NUL in the date-time": (encoded([AFTER, AT.isoformat() + "\x00", str(ID)]), "ISO 8601 date-time"),
    "a date-time spelled otherwise": (encoded([AFTER, "2026-11-24 01:02:03.456789Z", str(ID)]), "ISO 8601 date-time"),
    "bad UUID": (encoded([AFTER, AT.isoformat(), "not-a-uuid"]), "does not hold a UUID"),
    "UUID in another spelling": (encoded([AFTER, AT.isoformat(), "{" + str(ID) + "}"]), "does not hold a UUID"),
    "truncated": ("WyJhZnRlciIsIjIwMjYiXQ", "is not [direction, time, id]"),
}


@pytest.mark.parametrize(("text", "reason"), MALFORMED.values(), ids=MALFORMED.keys())
def test_anything_else_is_refused_with_its_reason(text, reason):
    with pytest.raises(MalformedCursor, match=reason.replace("[", r"\[").replace("]", r"\]")):
        cursor_decode(text=text)


def test_a_cursor_error_is_a_value_error():
    assert issubclass(MalformedCursor, ValueError)


def test_a_recursion_error_while_decoding_is_a_malformed_cursor():
    """Nesting within the length limit, decoded with little stack left (a deep request's)."""
    text = encoded(b"[" * 190 + b"]" * 190)
    depth, frame = 0, sys._getframe()
    while frame:
        depth, frame = depth + 1, frame.f_back
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 50)
    try:
        with pytest.raises(MalformedCursor):
            cursor_decode(text=text)
    finally:
        sys.setrecursionlimit(limit)

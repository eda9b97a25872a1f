"""Where a page of messages ends, as an opaque ``?cursor=`` (the admin's list and the API's):
the ordering value and id of the page's last (or first) row, and which way the next page goes.
Pure. A cursor is only ever one a page wrote, so anything else is refused, with the reason: read
as the first page it would hide the mistake, and one nested a few thousand deep would be a
RecursionError (a 500)."""

from __future__ import annotations

import base64
import json
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

AFTER, BEFORE = "after", "before"  # older (or later due) rows; newer ones
MAX_LENGTH = 512  # a real one is ~120 characters; checked before anything is decoded
_ALPHABET = frozenset(string.ascii_letters + string.digits + "-_")  # base64url, unpadded
T = TypeVar("T")


class MalformedCursor(ValueError):
    """Text that is not a cursor a page wrote. The message says why, to follow the parameter's
    name (``cursor is longer than 512 characters``)."""


@dataclass(frozen=True)
class Position:
    """The ordering column's value and the id of a row (the id breaks ties: a bulk request's
    1,000 messages share their created_at)."""

    at: datetime
    id: uuid.UUID


def cursor_encode(*, direction: str, position: Position) -> str:
    raw = json.dumps([direction, position.at.isoformat(), str(position.id)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def cursor_decode(*, text: str) -> tuple[str, Position] | None:
    """(direction, position); None for no cursor (the first page); MalformedCursor for any other text."""
    if not text:
        return None
    if len(text) > MAX_LENGTH:
        raise MalformedCursor(f"is longer than {MAX_LENGTH} characters")
    if not _ALPHABET.issuperset(text):
        raise MalformedCursor("is not base64url text")
    try:
        fields = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, RecursionError):  # binascii.Error, UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise MalformedCursor("does not decode to JSON") from None
    if not (isinstance(fields, list) and len(fields) == 3 and all(isinstance(field, str) for field in fields)):
        raise MalformedCursor("is not [direction, time, id] in JSON")
    direction, at_text, id_text = fields
    if direction not in (AFTER, BEFORE):
        raise MalformedCursor(f"has a direction other than {AFTER!r} or {BEFORE!r}")
    at, row_id = _parsed(datetime.fromisoformat, at_text), _parsed(uuid.UUID, id_text)
    if at is None or at.isoformat() != at_text:  # each as cursor_encode spells it, and only so
        raise MalformedCursor("does not hold an ISO 8601 date-time")
    if at.tzinfo is None:
        raise MalformedCursor("holds a date-time without a UTC offset")
    if row_id is None or str(row_id) != id_text:
        raise MalformedCursor("does not hold a UUID")
    return direction, Position(at, row_id)


def _parsed(parse: Callable[[str], T], text: str) -> T | None:
    try:
        return parse(text)
    except ValueError:  # fromisoformat let a trailing NUL through (3.11), so each is compared with its text too
        return None

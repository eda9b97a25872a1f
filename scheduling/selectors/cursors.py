"""Where a page of messages ends, as an opaque ``?cursor=`` (the admin's list and the API's):
the ordering value and id of the page's last (or first) row, and which way the next page goes.
Pure; a cursor that does not decode means the first page."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from datetime import datetime

AFTER, BEFORE = "after", "before"  # older (or later due) rows; newer ones


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
    """(direction, position), or None for a missing or malformed cursor."""
    if not text:
        return None
    try:
        direction, at, message_id = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        position = Position(datetime.fromisoformat(at), uuid.UUID(message_id))
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        return None
    if direction not in (AFTER, BEFORE) or position.at.tzinfo is None:
        return None
    return direction, position

"""What text the platform takes, one rule each, pure (every module that refuses or cleans text
asks here, and says why in the same words):

- no NUL (U+0000): PostgreSQL's text and jsonb cannot hold one, and it cannot even compare one
  (a filter with a NUL reached the database as a 500): a name with one matches no row, an input
  with one is refused, an excerpt we store has it replaced;
- no unpaired surrogate: psycopg cannot encode one as UTF-8;
- no control character (C0, DEL, C1) nor unpaired surrogate in a name, key, target or date: a
  parser that stops at one (dates did) would store something other than what was sent. A JSON
  payload may carry any of them but NUL.
"""

from __future__ import annotations

import re

NUL = "\x00"
# the words every error gives for each rule ("must be a string ..., without NUL characters (U+0000)")
NUL_CHARACTERS = "NUL characters (U+0000)"
CONTROL_CHARACTERS = "control characters (U+0000-U+001F, U+007F-U+009F) or unpaired surrogates"

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def has_nul(value: object) -> bool:
    """Whether a string, or any key or string inside a JSON value (dicts and lists), holds a NUL."""
    if isinstance(value, str):
        return NUL in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    return False


def has_unpaired_surrogate(value: str) -> bool:
    return _SURROGATE.search(value) is not None


def has_control_characters(value: str) -> bool:
    """C0 (NUL, tab and newline included), DEL, C1, or an unpaired surrogate."""
    return _CONTROL.search(value) is not None


def nul_replaced(value: str, *, by: str = "") -> str:
    """``value`` with each NUL replaced ``by`` (dropped by default): text that came from elsewhere
    (a response's body) stored as it can be."""
    return value.replace(NUL, by)

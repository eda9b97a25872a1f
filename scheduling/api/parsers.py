"""The API's JSON parser: orjson (DRF's for what orjson refuses), with a limit on nesting checked
before parsing. Python's json parser recurses per level, so a body nested 10,000 deep raised
RecursionError (a 500); a linear scan of the brackets outside strings refuses it first."""

import codecs
import io
import re

import orjson

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding

from ..conf import conf, setting_name

# A JSON string, escapes included (the unrolled form: linear, no backtracking).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPENING = frozenset(b"[{")


_LONG_NUMBER = re.compile(rb"[0-9]{19}")  # an integer that may be past 64 bits, which orjson reads as a float


def _depth_exceeds(outside_strings: bytes, limit: int) -> bool:
    depth = 0
    for byte in outside_strings.translate(None, _NOT_BRACKETS):
        if byte in _OPENING:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """True if arrays/objects in ``body`` nest deeper than ``limit`` (stops at the first level over)."""
    return _depth_exceeds(_STRING.sub(b"", body), limit)


class DepthLimitedJSONParser(JSONParser):
    """JSON bodies nested at most DELAY_MAX_JSON_DEPTH levels (arrays and objects); deeper: 400."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context, body = parser_context or {}, stream.read()
        encoding = get_encoding(parser_context)
        if codecs.lookup(encoding).name != "utf-8":  # scanned as UTF-8: no ASCII byte is part of another character
            try:
                body = body.decode(encoding).encode("utf-8", "surrogatepass")
            except UnicodeError as exc:
                raise ParseError(f"JSON parse error - {exc}") from None
            parser_context = {**parser_context, "encoding": "utf-8"}
        limit, outside_strings = conf().max_json_depth, _STRING.sub(b"", body)
        if _depth_exceeds(outside_strings, limit):
            raise ParseError(f"JSON parse error - the body nests deeper than {limit} levels "
                             f"({setting_name('max_json_depth')})")
        if not _LONG_NUMBER.search(outside_strings):
            try:  # orjson: ~4x faster on a 1,000-message bulk; what it refuses goes to DRF's parser,
                return orjson.loads(body)  # which accepts it or words the error as before
            except orjson.JSONDecodeError:
                pass
        return super().parse(io.BytesIO(body), media_type, parser_context)


"""The API's JSON parser: orjson (DRF's for what orjson refuses), with a limit on nesting checked
before parsing. Python's json parser recurses per level, so a body nested 10,000 deep would raise
RecursionError (a 500); a linear scan of the brackets outside strings refuses it first.

The scan is a few passes in C, none of which can backtrack. A regular expression matching whole
strings would retry from every quote of a string that never closes (``"\\"\\"\\"...``): 32 KB
takes 5 s, a megabyte hours."""

import codecs
import io
import re
from array import array
from itertools import accumulate

import orjson
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding

from scheduling.config.conf import conf, setting_name

_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # a backslash and the byte it escapes: fixed length, nothing to retry
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1, +1, -1, -1 as signed bytes
_CHUNK = 1 << 14  # brackets summed at a time: stops soon after the first level over

_LONG_NUMBER = re.compile(rb"[0-9]{19}")  # an integer that may be past 64 bits, which orjson reads as a float


def outside_strings(body: bytes) -> bytes:
    """``body`` without its JSON strings. Once the escapes are gone every quote opens or closes a
    string, so the text outside is every other piece between quotes. A string left open runs to the
    end, which the parser refuses anyway; a backslash outside strings (no JSON has one) is a parse
    error at that point, and up to it the pieces are the parser's."""
    return b"".join(_ESCAPE.sub(b"", body).split(b'"')[::2])


def _depth_exceeds(outside: bytes, limit: int) -> bool:
    steps, depth = outside.translate(_STEPS, _NOT_BRACKETS), 0
    for start in range(0, len(steps), _CHUNK):
        depths = list(accumulate(array("b", steps[start:start + _CHUNK]), initial=depth))
        if max(depths) > limit:
            return True
        depth = depths[-1]
    return False


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """True if arrays/objects in ``body`` nest deeper than ``limit`` (stops soon after the first level over)."""
    return _depth_exceeds(outside_strings(body), limit)


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
        limit, outside = conf().max_json_depth, outside_strings(body)
        if _depth_exceeds(outside, limit):
            raise ParseError(f"JSON parse error - the body nests deeper than {limit} levels "
                             f"({setting_name('max_json_depth')})")
        if not _LONG_NUMBER.search(outside):
            try:  # orjson: ~4x faster on a 1,000-message bulk; what it refuses goes to DRF's parser,
                return orjson.loads(body)  # which accepts it or words the error as before
            except orjson.JSONDecodeError:
                pass
        return super().parse(io.BytesIO(body), media_type, parser_context)


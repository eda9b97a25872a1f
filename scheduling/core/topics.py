"""Topics, topic patterns and payload filters of subscriptions (issue 48; docs/guides/events.md). Pure.

A topic is dot-separated words of ``[A-Za-z0-9_-]`` (``invoice.paid``); a pattern's word is a
literal, ``*`` (exactly one word) or ``#`` (zero or more), as AMQP topic bindings. Both are bounded
(255 characters, 32 words) before anything is split, and matching keeps a set of pattern positions
(no backtracking): at most words(pattern) x words(topic) steps, so ``#.#.#...`` against a long
topic costs what it costs, never an exponential search. Runs of ``#`` are one ``#``.

A filter is ``{field path: value | [values]}``: each path (``a.b.c``) is walked into the payload's
objects, one key per segment, and the value found must equal the value (or one of the values).
Evaluating a filter costs its segments and values, whatever the payload's size: nothing searches it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from scheduling.core.text import (
    CONTROL_CHARACTERS,
    NUL_CHARACTERS,
    has_control_characters,
    has_nul,
    has_unpaired_surrogate,
)

MAX_TOPIC_CHARS = 255
MAX_WORDS = 32
MAX_FILTER_PATHS = 20
MAX_PATH_SEGMENTS = 10
MAX_FILTER_VALUES = 100
MAX_FILTER_BYTES = 4096
MAX_SEGMENT_CHARS = 100

_WORD = re.compile(r"[A-Za-z0-9_-]+")
_SEGMENT = re.compile(f"[^.]{{1,{MAX_SEGMENT_CHARS}}}")  # and no control character (core/text.py)
ONE, ANY = "*", "#"


class TopicError(ValueError):
    """Why a topic, a pattern or a filter is refused: one line, for a 400 on its field."""


def _words(text: object, what: str) -> list[str]:
    if not isinstance(text, str) or not text:
        raise TopicError(f"a {what} is a non-empty string of dot-separated words")
    if len(text) > MAX_TOPIC_CHARS:
        raise TopicError(f"a {what} is at most {MAX_TOPIC_CHARS} characters (this one is {len(text):,})")
    words = text.split(".")
    if len(words) > MAX_WORDS:
        raise TopicError(f"a {what} has at most {MAX_WORDS} words (this one has {len(words):,})")
    return words


def topic_parse(text: object) -> tuple[str, ...]:
    """The words of a topic (literal words only), or TopicError."""
    words = _words(text, "topic")
    for word in words:
        if not _WORD.fullmatch(word):
            raise TopicError(f"topic word {word[:40]!r} is not letters, digits, '_' or '-' (words are separated by '.')")
    return tuple(words)


def pattern_parse(text: object) -> tuple[str, ...]:
    """The words of a pattern, runs of ``#`` made one, or TopicError. A word is ``*``, ``#`` or a
    literal: ``a*`` or ``#b`` is refused, not read as a glob."""
    words = _words(text, "topic pattern")
    parsed: list[str] = []
    for word in words:
        if word not in (ONE, ANY) and not _WORD.fullmatch(word):
            raise TopicError(f"pattern word {word[:40]!r} is neither '*', '#' nor letters, digits, '_' or '-'")
        if word == ANY and parsed and parsed[-1] == ANY:
            continue
        parsed.append(word)
    return tuple(parsed)


def pattern_match_steps(pattern: tuple[str, ...], topic: tuple[str, ...]) -> tuple[bool, int]:
    """Whether the parsed ``pattern`` matches the parsed ``topic``, and the steps it took (one per
    pattern position looked at): the set of positions reached grows by at most one a word."""
    steps = 0

    def closure(positions: set[int]) -> set[int]:
        nonlocal steps
        out = set(positions)
        for i in sorted(positions):  # a '#' may match nothing: the position after it is reached too
            while i < len(pattern) and pattern[i] == ANY:
                steps += 1
                i += 1
                out.add(i)
        return out

    positions = closure({0})
    for word in topic:
        after = set()
        for i in positions:
            steps += 1
            if i == len(pattern):
                continue
            if pattern[i] == ANY:
                after.add(i)  # '#' takes this word and may take more
            elif pattern[i] == ONE or pattern[i] == word:
                after.add(i + 1)
        if not after:
            return False, steps
        positions = closure(after)
    return len(pattern) in positions, steps


def pattern_matches(pattern: tuple[str, ...], topic: tuple[str, ...]) -> bool:
    return pattern_match_steps(pattern, topic)[0]


Scalar = str | int | float | bool | None  # a filter's value: JSON's scalars


@dataclass(frozen=True)
class Filter:
    """A parsed filter: (path segments, accepted values) per path; empty: every payload."""

    paths: tuple[tuple[tuple[str, ...], tuple[Scalar, ...]], ...] = ()


_SCALARS = (str, int, float, bool, type(None))


def filter_parse(value: object) -> Filter:
    """A filter object as stored (``{}`` or null: none), or TopicError saying what is wrong."""
    if value is None or value == {}:
        return Filter()
    if not isinstance(value, dict):
        raise TopicError("a filter is an object: {\"field.path\": value or [values]}")
    if len(value) > MAX_FILTER_PATHS:
        raise TopicError(f"a filter has at most {MAX_FILTER_PATHS} paths (this one has {len(value):,})")
    try:
        size = len(json.dumps(value, separators=(",", ":"), allow_nan=False).encode())
    except (TypeError, ValueError):
        raise TopicError("a filter is JSON (no NaN or infinity)") from None
    if size > MAX_FILTER_BYTES:
        raise TopicError(f"a filter is at most {MAX_FILTER_BYTES:,} bytes of JSON (this one is {size:,})")
    paths: list[tuple[tuple[str, ...], tuple[Scalar, ...]]] = []
    count = 0
    for path, accepted in value.items():
        if not isinstance(path, str):
            raise TopicError("a filter's paths are strings")
        segments = path.split(".")
        if not path or len(segments) > MAX_PATH_SEGMENTS or any(
                not _SEGMENT.fullmatch(s) or has_control_characters(s) for s in segments):
            raise TopicError(f"filter path {path[:40]!r}: 1 to {MAX_PATH_SEGMENTS} segments joined by '.', each 1 to "
                             f"{MAX_SEGMENT_CHARS} characters, without {CONTROL_CHARACTERS}")
        values = accepted if isinstance(accepted, list) else [accepted]
        if not values:
            raise TopicError(f"filter path {path[:40]!r}: give a value or a non-empty list of values")
        if any(not isinstance(v, _SCALARS) or (isinstance(v, str) and _unstorable(v)) for v in values):
            raise TopicError(f"filter path {path[:40]!r}: values are strings (without {NUL_CHARACTERS} or unpaired "
                             "surrogates), numbers, "
                             "true, false or null")
        count += len(values)
        if count > MAX_FILTER_VALUES:
            raise TopicError(f"a filter has at most {MAX_FILTER_VALUES} values in all")
        paths.append((tuple(segments), tuple(values)))
    return Filter(tuple(paths))


def _unstorable(value: str) -> bool:
    """What jsonb (NUL) and UTF-8 (unpaired surrogates) cannot hold: a filter's value never matches it."""
    return has_nul(value) or has_unpaired_surrogate(value)


_MISSING = object()


def _walk(payload: object, segments: tuple[str, ...]) -> object:
    """The value at ``segments``, one object key per segment (a list's item by its index), or _MISSING."""
    here = payload
    for segment in segments:
        if isinstance(here, dict):
            here = here.get(segment, _MISSING)
        elif isinstance(here, list) and segment.isdigit() and len(segment) < 10 and int(segment) < len(here):
            here = here[int(segment)]
        else:
            return _MISSING
        if here is _MISSING:
            return _MISSING
    return here


def _same(found: object, wanted: object) -> bool:
    """JSON equality of scalars: true is not 1, 1 is 1.0."""
    if isinstance(found, bool) or isinstance(wanted, bool):
        return isinstance(found, bool) and isinstance(wanted, bool) and found is wanted
    if found is None or wanted is None:
        return found is None and wanted is None
    if isinstance(found, (int, float)) and isinstance(wanted, (int, float)):
        return found == wanted
    return isinstance(found, str) and isinstance(wanted, str) and found == wanted


def filter_matches(parsed: Filter, payload: object) -> bool:
    """Every path's value is one of its accepted values (a path the payload lacks: no match)."""
    for segments, accepted in parsed.paths:
        found = _walk(payload, segments)
        if found is _MISSING or not any(_same(found, wanted) for wanted in accepted):
            return False
    return True

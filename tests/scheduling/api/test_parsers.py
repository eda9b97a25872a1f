"""The JSON parser's depth limit: counted over brackets outside strings, without recursion, so a
body nested 10,000 deep is a 400 naming the body (it was a RecursionError, a 500) and stores nothing."""

import json
import sys
import time

import pytest

from scheduling.api.parsers import json_depth_exceeds
from scheduling.models import ScheduledMessage


def nested(depth: int, inner="1") -> str:
    return "[" * depth + inner + "]" * depth


@pytest.mark.parametrize(("body", "limit", "exceeds"), [
    ("1", 0, False),
    ("[]", 1, False), ("[]", 0, True),
    (nested(64), 64, False), (nested(65), 64, True),
    ('{"a": {"b": [1, 2, {"c": []}]}}', 5, False), ('{"a": {"b": [1, 2, {"c": []}]}}', 4, True),
    ('["[[[[[[", "{{{{"]', 1, False),  # brackets inside strings do not count
    (r'["\"[[[[[", "\\", [2]]', 2, False), (r'["\"[[[[[", "\\", [[2]]]', 2, True),  # escaped quotes, backslashes
    ('[1], [2], [3]', 1, False),  # siblings do not add up
])
def test_depth_is_counted_outside_strings(body, limit, exceeds):
    assert json_depth_exceeds(body.encode(), limit) is exceeds


def test_ten_thousand_deep_is_found_at_once_and_without_recursion():
    body = nested(10_000).encode()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100)  # the check must not need the stack the json parser needs
    try:
        started = time.perf_counter()
        assert json_depth_exceeds(body, 64)
        assert time.perf_counter() - started < 0.05
    finally:
        sys.setrecursionlimit(limit)


def test_a_flat_large_body_is_scanned_in_linear_time():
    body = json.dumps({"messages": [{"endpoint": "e", "payload": {"k": ["[" * 50, [1, 2]]}}] * 20_000}).encode()
    started = time.perf_counter()
    assert not json_depth_exceeds(body, 64)
    assert time.perf_counter() - started < 1.0, len(body)


# --- the scan is linear: the strings' regex once retried from every quote of a string left open ---

MB = 1_000_000
PATHOLOGICAL = {  # the old scan: 32 KB of the first took 5 s; 1 MB of it, hours
    "escaped quotes in an open string": b'"' + b'\\"' * (MB // 2),
    "escaped quotes alone": b'\\"' * (MB // 2),
    "open brackets": b"[" * MB,
    "closed brackets": b"[]" * (MB // 2),
    "a run of backslashes in an open string": b'"' + b"\\" * MB,
    "an odd run of backslashes then a quote": b'["' + b"\\" * (MB - 1) + b'"]',
    "many strings left open": b'"\\' * (MB // 2),
    "alternating quote, backslash, quote": b'"\\"' * (MB // 3),
    "escaped quotes in an object": b'{"a": "' + b'x\\"[' * (MB // 4),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("body", PATHOLOGICAL.values(), ids=PATHOLOGICAL.keys())
def test_a_megabyte_of_any_shape_is_scanned_in_well_under_a_second(body):
    started = time.perf_counter()
    json_depth_exceeds(body, 64)
    assert time.perf_counter() - started < 5.0  # ~0.05 s here; the bound is generous for a loaded machine


@pytest.mark.parametrize(("body", "outside"), [
    (b'["a\\\\", "[["]', b"[, ]"),  # an escaped backslash, then the quote closes
    (b'["\\"[", 1]', b"[, 1]"),  # an escaped quote does not close
    (b'["\\\\\\"", 2]', b"[, 2]"),  # three backslashes: an escaped backslash, an escaped quote, the close
    (b'["\\\\\\\\", 2]', b"[, 2]"),  # four: two escaped backslashes, the close
    (b'["\\u0022[", "\\u005b"]', b"[, ]"),  # unicode escapes of a quote and a bracket are text
    (b'{"k[": "v{", "n": [1]}', b"{: , : [1]}"),  # brackets in keys and values do not count
    ('["é[", "日本{", 3]'.encode(), b"[, , 3]"),  # UTF-8 text around brackets in strings
    (b'"', b""), (b'["abc[[', b"["),  # a string left open runs to the end
    (b'[1, "", 2]', b"[1, , 2]"), (b"", b""),
])
def test_outside_strings_is_the_text_a_json_parser_reads_outside_strings(body, outside):
    from scheduling.api.parsers import outside_strings

    assert outside_strings(body) == outside


@pytest.mark.timeout(60)
@pytest.mark.django_db
def test_a_pathological_body_is_a_prompt_400(api):
    started = time.perf_counter()
    response = api.post("/api/messages/", PATHOLOGICAL["escaped quotes in an open string"],
                        content_type="application/json")
    assert response.status_code == 400 and "JSON parse error" in response.json()["detail"]
    assert time.perf_counter() - started < 5.0
    assert not ScheduledMessage.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "body"), [
    ("/api/messages/", nested(10_000)),
    ("/api/messages/", '{"endpoint": "e", "delay_seconds": 1, "payload": ' + nested(10_000) + "}"),
    ("/api/messages/bulk/", '{"messages": [{"endpoint": "e", "delay_seconds": 1, "payload": ' + nested(70) + "}]}"),
    ("/api/endpoints/", '{"name": ' + nested(10_000, '"x"') + "}"),
])
def test_a_body_nested_too_deep_is_400_naming_the_body(api, path, body):
    response = api.post(path, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert "body nests deeper than 64 levels (DELAY_MAX_JSON_DEPTH)" in response.json()["detail"]
    assert not ScheduledMessage.objects.exists()


@pytest.mark.django_db
def test_the_limit_is_the_setting(api, settings):
    settings.DELAY_MAX_JSON_DEPTH = 4
    deep = '{"endpoint": "nowhere", "delay_seconds": 1, "payload": [[[[1]]]]}'  # 5 levels
    response = api.post("/api/messages/", deep, content_type="application/json")
    assert response.status_code == 400 and "deeper than 4 levels" in response.json()["detail"]
    response = api.post("/api/messages/", deep.replace("[[[[1]]]]", "[[[1]]]"), content_type="application/json")
    assert response.status_code == 400 and "unknown endpoint" in response.json()["endpoint"][0]  # parsed, then judged


@pytest.mark.django_db
def test_another_charset_is_scanned_after_decoding(api):
    body = nested(100).encode("utf-16")
    response = api.post("/api/messages/", body, content_type="application/json; charset=utf-16")
    assert response.status_code == 400 and "deeper than 64" in response.json()["detail"]


# --- orjson first, DRF's parser for what orjson refuses: the same acceptance and the same errors ---


@pytest.mark.parametrize(("body", "parsed"), [
    (b'{"a": [1, 2.5, "x", null, true]}', {"a": [1, 2.5, "x", None, True]}),  # orjson
    (b'{"big": 123456789012345678901234567890}', {"big": 123456789012345678901234567890}),  # past 64 bits
    (b'["\\ud800"]', ["\ud800"]),  # a lone surrogate escape, which orjson refuses and json keeps
])
def test_orjson_parses_and_drf_takes_what_it_refuses(body, parsed):
    import io

    from scheduling.api.parsers import DepthLimitedJSONParser

    assert DepthLimitedJSONParser().parse(io.BytesIO(body), "application/json", {}) == parsed


@pytest.mark.parametrize(("body", "error"), [(b'{"a": NaN}', "Out of range float values"), (b'{"a": ', "JSON parse error")])
def test_what_neither_takes_is_drfs_parse_error(body, error):
    import io

    from rest_framework.exceptions import ParseError

    from scheduling.api.parsers import DepthLimitedJSONParser

    with pytest.raises(ParseError, match=error):
        DepthLimitedJSONParser().parse(io.BytesIO(body), "application/json", {})

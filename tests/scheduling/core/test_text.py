"""The one text rule (core/text.py): what holds a NUL, a control character or an unpaired
surrogate, and that the pure parts which refuse text say so in its words."""

import ast
import re

import pytest

from harness.paths import ROOT
from scheduling.core import debounce, ordering, topics
from scheduling.core.text import (
    CONTROL_CHARACTERS,
    NUL_CHARACTERS,
    has_control_characters,
    has_nul,
    has_unpaired_surrogate,
    nul_replaced,
)


@pytest.mark.parametrize("value, expected", [
    ("", False), ("plain", False), ("\x00", True), ("a\x00b", True), ("\\u0000", False), ("\x01\n\t", False),
    ({"k": "v"}, False), ({"k": "a\x00"}, True), ({"\x00": 1}, True), ([1, [{"a": ["b\x00"]}]], True),
    ([1, 2.5, None, True], False), (None, False), (0, False), (b"\x00", False),  # bytes are not text
])
def test_has_nul(value, expected):
    assert has_nul(value) is expected


@pytest.mark.parametrize("value, expected", [
    ("plain text, é, 日本, 🙂", False), (" ", False), ("~", False), ("\xa0", False),  # U+00A0 is no control
    ("\x00", True), ("\x1f", True), ("\t", True), ("\n", True), ("\x7f", True), ("\x80", True), ("\x9f", True),
    ("\ud800", True), ("\udfff", True), ("a\udc00b", True),
])
def test_has_control_characters(value, expected):
    assert has_control_characters(value) is expected


def test_has_unpaired_surrogate():
    assert has_unpaired_surrogate("\ud83d") and not has_unpaired_surrogate("🙂") and not has_unpaired_surrogate("\x00")


def test_nul_replaced():
    assert nul_replaced("a\x00b\x00") == "ab"
    assert nul_replaced("a\x00b", by="\ufffd") == "a\ufffdb"
    assert nul_replaced("plain") == "plain"


def test_the_pure_parts_refuse_in_the_rules_words():
    assert ordering.key_problem("a\x00b") == f"must be a string of 1 to 200 characters, without {NUL_CHARACTERS}"
    assert ordering.key_problem("a\nb") is None  # only NUL: an ordering key is stored, never parsed
    _, errors = debounce.parse({"key": "a\x1bb", "seconds": 1}, max_delay_s=60)
    assert CONTROL_CHARACTERS in errors["debounce.key"]
    with pytest.raises(topics.TopicError, match=re.escape(NUL_CHARACTERS)):
        topics.filter_parse({"a": "x\x00"})
    with pytest.raises(topics.TopicError, match="unpaired"):
        topics.filter_parse({"a": "\ud800"})
    with pytest.raises(topics.TopicError, match=re.escape(CONTROL_CHARACTERS)):
        topics.filter_parse({"a\nb": 1})
    assert topics.filter_parse({"a.b": ["x", 1]})  # plain ones pass


def test_no_other_module_spells_the_rule():
    """A NUL (or a character class from it) written anywhere else in the platform is the rule
    written a second time: ask core/text.py."""
    root = ROOT / "scheduling"
    spelt = [f"{path.relative_to(root)}:{node.lineno}" for path in sorted(root.rglob("*.py"))
             if path != root / "core" / "text.py"
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\x00" in node.value]
    assert spelt == []

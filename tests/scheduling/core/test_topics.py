"""Topics, patterns and filters (core/topics.py): AMQP's topic rules, bounded input, and costs
counted in steps (never timed) for adversarial patterns."""

import pytest

from scheduling.core.topics import (
    MAX_FILTER_PATHS,
    MAX_FILTER_VALUES,
    MAX_PATH_SEGMENTS,
    MAX_WORDS,
    TopicError,
    filter_matches,
    filter_parse,
    pattern_match_steps,
    pattern_matches,
    pattern_parse,
    topic_parse,
)


def matches(pattern: str, topic: str) -> bool:
    return pattern_matches(pattern_parse(pattern), topic_parse(topic))


@pytest.mark.parametrize("pattern, topic, expected", [
    ("invoice.paid", "invoice.paid", True),
    ("invoice.paid", "invoice.failed", False),
    ("invoice.paid", "invoice.paid.late", False),
    ("invoice.*", "invoice.paid", True),
    ("invoice.*", "invoice", False),
    ("invoice.*", "invoice.paid.late", False),
    ("*.paid", "invoice.paid", True),
    ("*", "invoice", True),
    ("*", "invoice.paid", False),
    ("#", "invoice", True),
    ("#", "invoice.paid.late", True),
    ("invoice.#", "invoice", True),  # '#' takes zero words
    ("invoice.#", "invoice.paid.late", True),
    ("invoice.#", "order.paid", False),
    ("#.paid", "paid", True),
    ("#.paid", "invoice.paid", True),
    ("#.paid", "a.b.c.paid", True),
    ("#.paid", "invoice.paid.late", False),
    ("a.#.z", "a.z", True),
    ("a.#.z", "a.b.c.z", True),
    ("a.#.z", "a.b.c.y", False),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b", True),
    ("a.*.#", "a.b.c.d", True),
    ("#.*", "a", True),
    ("#.*.*", "a", False),
    ("a.#.#.b", "a.b", True),
    ("a.#.b.#.c", "a.x.b.y.c", True),
    ("a.#.b.#.c", "a.x.c.y.b", False),
    ("Invoice.paid", "invoice.paid", False),  # case counts
    ("in-voice_1.paid", "in-voice_1.paid", True),
])
def test_patterns_match_as_amqp_topic_bindings(pattern, topic, expected):
    assert matches(pattern, topic) is expected


@pytest.mark.parametrize("topic", ["", ".", "a.", ".a", "a..b", "a.*", "a.#", "a b", "a/b", "é", "a.b\x00",
                                   "x" * 256, ".".join(["a"] * (MAX_WORDS + 1)), 7, None, ["a"]])
def test_bad_topics_are_refused(topic):
    with pytest.raises(TopicError):
        topic_parse(topic)


@pytest.mark.parametrize("pattern", ["", "a..b", "a*", "#b", "a.*b", "**", "a.b.", "x" * 256,
                                     ".".join(["*"] * (MAX_WORDS + 1)), {"a": 1}])
def test_bad_patterns_are_refused(pattern):
    with pytest.raises(TopicError):
        pattern_parse(pattern)


def test_the_bounds_themselves_are_allowed():
    assert len(topic_parse(".".join(["a"] * MAX_WORDS))) == MAX_WORDS
    assert topic_parse("x" * 255) == ("x" * 255,)
    assert pattern_parse("#.#.#.a") == ("#", "a")  # a run of '#' is one


def test_many_hashes_cost_steps_bounded_by_the_words_not_an_exponential_search():
    """``#.a.#.a...`` (16 '#' between literals: no run to collapse) against 32 words that almost
    match: a backtracking matcher tries ~C(32,16) splits; this one at most words x words steps."""
    pattern = pattern_parse(".".join(["#", "a"] * 15 + ["#", "b"]))
    topic = topic_parse(".".join(["a"] * MAX_WORDS))
    matched, steps = pattern_match_steps(pattern, topic)
    assert matched is False
    assert steps <= 2 * (len(pattern) + 1) * (len(topic) + 1), steps
    matched, steps = pattern_match_steps(pattern, topic_parse(".".join(["a"] * 31 + ["b"])))
    assert matched is True
    assert steps <= 2 * (len(pattern) + 1) * (len(topic) + 1), steps


def test_a_run_of_hashes_collapses_so_it_costs_what_one_costs():
    long_run = pattern_parse(".".join(["#"] * MAX_WORDS))
    topic = topic_parse(".".join(["w"] * MAX_WORDS))
    assert long_run == ("#",)
    matched, steps = pattern_match_steps(long_run, topic)
    assert matched and steps <= 4 * MAX_WORDS


def test_steps_grow_linearly_with_the_topic_for_a_fixed_pattern():
    pattern = pattern_parse("#.*.#.x")
    _, short = pattern_match_steps(pattern, topic_parse(".".join(["a"] * 8)))
    _, long = pattern_match_steps(pattern, topic_parse(".".join(["a"] * 32)))
    assert long <= 4 * short + 16, (short, long)


PAYLOAD = {"customer": {"country": "FR", "tier": 2, "vip": True, "tags": ["a", "b"]},
           "amount": 12.5, "status": None, "items": [{"sku": "X1"}]}


@pytest.mark.parametrize("raw, expected", [
    ({}, True),
    (None, True),
    ({"customer.country": "FR"}, True),
    ({"customer.country": "DE"}, False),
    ({"customer.country": ["DE", "FR"]}, True),
    ({"customer.country": ["DE", "IT"]}, False),
    ({"customer.tier": 2}, True),
    ({"customer.tier": 2.0}, True),  # JSON numbers
    ({"customer.tier": "2"}, False),
    ({"customer.vip": True}, True),
    ({"customer.vip": 1}, False),  # true is not 1
    ({"customer.tier": True}, False),
    ({"status": None}, True),
    ({"missing": None}, False),  # absent is not null
    ({"amount": 12.5, "customer.country": "FR"}, True),  # every path
    ({"amount": 12.5, "customer.country": "DE"}, False),
    ({"customer": "FR"}, False),  # an object is not a scalar
    ({"customer.country.deeper": "FR"}, False),
    ({"items.0.sku": "X1"}, True),  # a list's item by its index
    ({"items.1.sku": "X1"}, False),
    ({"customer.tags": "a"}, False),  # no search inside lists
])
def test_filters_are_equality_or_any_of_on_walked_paths(raw, expected):
    assert filter_matches(filter_parse(raw), PAYLOAD) is expected


def test_a_filter_on_a_non_object_payload_matches_only_when_empty():
    assert filter_matches(filter_parse({}), [1, 2])
    assert not filter_matches(filter_parse({"a": 1}), "text")


@pytest.mark.parametrize("raw", [
    [], "a", 3,
    {f"p{i}": 1 for i in range(MAX_FILTER_PATHS + 1)},
    {".".join(["s"] * (MAX_PATH_SEGMENTS + 1)): 1},
    {"": 1}, {"a..b": 1}, {"a.": 1},
    {"a": []}, {"a": {"b": 1}}, {"a": [[1]]},
    {"a": list(range(MAX_FILTER_VALUES + 1))},
    {"a": "x" * 5000},
    {"a": float("nan")},
    {"a\x00b": 1}, {"a\nb": 1}, {"a": "x\x00"}, {"a": "\ud800"}, {"\udc00": 1}, {"s" * 101: 1},
])
def test_bad_filters_are_refused(raw):
    with pytest.raises(TopicError):
        filter_parse(raw)


def test_a_filter_never_reads_past_its_paths():
    """Evaluation walks the paths: a payload of 100,000 keys costs what a small one does, which
    shows as the same result whatever is beside the path (no search), and a deep path stops at
    the first missing key."""
    big = {f"k{i}": {"x": i} for i in range(100_000)}
    big["target"] = {"x": 1}
    assert filter_matches(filter_parse({"target.x": 1}), big)
    assert not filter_matches(filter_parse({"nothere.x": 1}), big)

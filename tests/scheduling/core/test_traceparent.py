"""W3C traceparent, read strictly: what is not a valid version-00 value is ignored (None), as W3C
Trace Context says a receiver does."""

import pytest

from scheduling.core import traceparent

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(("value", "kept"), [
    (VALID, VALID),
    (f"  {VALID} ", VALID),  # an HTTP header's blanks
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
    (VALID.upper(), None),  # W3C: lower-case hex only
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),  # all-zero trace id
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", None),  # all-zero parent id
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),  # a version this reads not
    ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),
    (VALID + "-extra", None),
    (VALID[:-1], None),
    ("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", None),
    ("x" * 100_000, None),  # bounded before the pattern runs
    ("", None), (None, None), (42, None), (["00"], None),
])
def test_only_a_valid_version_00_traceparent_is_kept(value, kept):
    assert traceparent.parse(value) == kept


def test_its_parts_and_a_child_in_the_same_trace():
    assert traceparent.trace_id(VALID) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert traceparent.span_id(VALID) == "00f067aa0ba902b7"
    assert traceparent.sampled(VALID) and not traceparent.sampled(VALID[:-2] + "00")
    child = traceparent.child(VALID)
    assert traceparent.parse(child) == child and traceparent.trace_id(child) == traceparent.trace_id(VALID)
    assert traceparent.span_id(child) != traceparent.span_id(VALID) and child.endswith("-01")
    assert traceparent.child(VALID, "1111111111111111") == "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"

"""Every regular expression that reads what a client sends, run on 100 KB of the shape most likely to
make it backtrack: each answers at once. The JSON scan's string regex took minutes on such a body
(tests/scheduling/api/test_parsers.py); this keeps the others from doing the same. Each pattern is
imported from where it is defined, so a change to one is run here."""

import re
import time

import pytest
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.urls import Resolver404, resolve
from django.utils.dateparse import datetime_re

from scheduling.admin.html import _MARKUP
from scheduling.api import parsers
from scheduling.api.endpoint_views import EndpointViewSet
from scheduling.api.schedule_views import ScheduleViewSet
from scheduling.core import text as core_text
from scheduling.models import endpoint_name_validator, schedule_key_validator
from topology.cascade import DESTINATION_RE, DOTTED_DESTINATION_RE

N = 100_000


def lookup(viewset) -> re.Pattern:
    """A viewset's URL path parameter as DRF's router anchors it."""
    return re.compile(f"^(?:{viewset.lookup_value_regex})$")


def validate(validator, value):
    try:
        validator(value)
    except ValidationError:
        pass


def api_path(path):
    try:
        resolve(path)
    except Resolver404:
        pass


def markup(text):
    return list(_MARKUP.finditer(text))


WEBHOOK = URLValidator(schemes=["http", "https"])
# name -> (what to run it with, the input): words that almost match, then the byte that fails them
CASES = {
    "JSON escapes (parsers)": (parsers._ESCAPE.sub, (b"", b"\\" * N + b'"')),
    "JSON long numbers, 18 digits at a time (parsers)":
        (parsers._LONG_NUMBER.search, (b"123456789012345678," * (N // 19),)),
    "control characters (core/text)": (core_text._CONTROL.search, ("a" * N,)),
    "endpoint name in the URL": (lookup(EndpointViewSet).search, ("a." * (N // 2) + "!",)),
    "endpoint name in the URL, one long word": (lookup(EndpointViewSet).search, ("a" * N + "!",)),
    "schedule key in the URL": (lookup(ScheduleViewSet).search, ("a:b." * (N // 4) + "!",)),
    "the API's URLs, dotted words then a format": (api_path, ("/api/endpoints/" + "a." * (N // 2) + "json!/",)),
    "the API's URLs, keys then an action": (api_path, ("/api/schedules/" + "a:" * (N // 2) + "x/pause.!",)),
    "the API's URLs, hyphenated words then a format": (api_path, ("/api/teams/" + "a-" * (N // 2) + "json!/",)),
    "endpoint name (v1/v2 word)": (DESTINATION_RE.search, ("a" * N + "!",)),
    "endpoint name (dotted)": (DOTTED_DESTINATION_RE.search, ("a." * (N // 2) + "!",)),
    "endpoint name validator (admin, API)": (validate, (endpoint_name_validator, "a-" * (N // 2) + ".")),
    "schedule key validator (admin, API)": (validate, (schedule_key_validator, "a:" * (N // 2) + ":")),
    "admin explain cells, bold left open": (markup, ("**a" + "*a" * (N // 2),)),
    "admin explain cells, code left open": (markup, ("`" + "a" * N,)),
    "admin explain cells, open on every line": (markup, ("**a `b\n" * (N // 7),)),
    "webhook URL (Django's URLValidator)": (validate, (WEBHOOK, "http://" + "a-" * N)),
    "webhook URL at its 2,048 limit": (validate, (WEBHOOK, "http://" + "a." * 1020 + "-")),
    "date-times in bodies and query strings (Django's)": (datetime_re.match, ("2024-01-01T00:00" + " " * N + "x",)),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("run", "args"), CASES.values(), ids=CASES.keys())
def test_each_regex_reading_client_input_is_linear(run, args):
    started = time.perf_counter()
    run(*args)
    assert time.perf_counter() - started < 2.0  # milliseconds here; quadratic would be seconds to hours

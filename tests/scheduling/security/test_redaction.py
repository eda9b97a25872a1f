"""Redacting a webhook URL for viewers and the audit log, table-driven: query values, userinfo
and fragments masked; where it goes (scheme, host, port, path) kept; anything else unchanged."""

import pytest

from scheduling.security.redaction import MASK, url_redacted


@pytest.mark.parametrize(("url", "shown"), [
    ("https://hooks.example.com/in?token=s3cret", "https://hooks.example.com/in?token=***"),
    ("https://h/p?a=1&b=2", "https://h/p?a=***&b=***"),
    ("https://h/p?a=1&&b=", "https://h/p?a=***&b=***"),
    ("https://h/p?s3cret", "https://h/p?***"),  # a bare word may be the secret itself
    ("https://user:pw@h/", "https://***@h/"),
    ("https://user@h:8443/x", "https://***@h:8443/x"),
    ("https://u:p@h:8443/x?k=v#frag", "https://***@h:8443/x?k=***#***"),
    ("https://h/p#access_token=abc", "https://h/p#***"),
    ("https://h/p", "https://h/p"),
    ("https://h/p?", "https://h/p?"),
    ("http://[::1]:8080/p?x=y", "http://[::1]:8080/p?x=***"),
    ("billing.tasks.charge", "billing.tasks.charge"),  # a Celery task's name: not a URL
    ("", ""),
    ("http://h:notaport/?t=1", MASK),  # cannot be parsed: masked whole
    ("http://[::1/?t=1", MASK),
])
def test_a_url_is_shown_without_its_secrets(url, shown):
    assert url_redacted(url) == shown
    assert "s3cret" not in url_redacted(url) and "pw" not in url_redacted(url).replace("/p", "")


def test_redacting_twice_changes_nothing_more():
    once = url_redacted("https://u:p@h/x?token=abc#f")
    assert url_redacted(once) == once

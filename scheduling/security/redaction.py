"""Redacting a URL for those who may not see its secrets: the values of its query string, its
userinfo (``user:password@``) and its fragment become ``***``; scheme, host, port and path stay,
so a viewer still sees where a webhook goes. Used for viewers (API serializers, the admin) and
in the audit log. Pure: one function, tested table-driven."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

MASK = "***"


def url_redacted(url: str) -> str:
    """``url`` with every query value, its userinfo and fragment masked; text that is not a URL
    with one of those (a Celery task's name, a plain URL) comes back as it is. What cannot be
    parsed is masked whole."""
    if not isinstance(url, str) or not url:
        return url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    query = "&".join(_masked_pair(pair) for pair in parts.query.split("&") if pair) if parts.query else ""
    fragment = MASK if parts.fragment else ""
    if (netloc, query, fragment) == (parts.netloc, parts.query, parts.fragment):
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def _masked_pair(pair: str) -> str:
    name, equals, _ = pair.partition("=")
    return f"{name}={MASK}" if equals else MASK  # a bare word (?s3cr3t) may be the secret itself

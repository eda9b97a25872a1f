"""Request bodies bounded before they are read (DELAY_MAX_BODY_BYTES): a body whose Content-Length
is over the limit answers 413 without a byte of it read; a chunked one (no Content-Length: gunicorn
passes it through as ``wsgi.input``, which Django would not read at all) is read up to the limit
and answers 413 once it passes it, else it is handed on as a body of known length. Django checks
DATA_UPLOAD_MAX_MEMORY_SIZE only where it reads a body itself (forms, and not their files), and DRF
reads JSON through ``request.body`` after its parsers are chosen: this middleware comes first, for
every path (settings.MIDDLEWARE)."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Protocol

from django.core.handlers.wsgi import LimitedStream
from django.http import HttpRequest, HttpResponseBase, JsonResponse

from scheduling.config.conf import conf, setting_name

_READ = 64 * 1024  # bytes read from a chunked body at a time


def too_large(limit: int) -> JsonResponse:
    return JsonResponse({"detail": f"the request body is over {limit:,} bytes ({setting_name('max_body_bytes')})"},
                        status=413)


class _Readable(Protocol):
    """``wsgi.input``: what the middleware needs of it."""

    def read(self, size: int, /) -> bytes: ...


def _read_capped(stream: _Readable, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of ``stream``; None as soon as it has more."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = stream.read(min(_READ, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None


class BodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        limit, meta = conf().max_body_bytes, request.META
        length = (meta.get("CONTENT_LENGTH") or "").strip()
        if length:
            if length.isdigit() and int(length) > limit:
                return too_large(limit)
        elif "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower() and "wsgi.input" in meta:
            body = _read_capped(meta["wsgi.input"], limit)
            if body is None:
                return too_large(limit)
            # what WSGIRequest would have made of it had the length been known (it read nothing yet)
            meta["CONTENT_LENGTH"] = str(len(body))
            # django-stubs declares it a BinaryIO; WSGIRequest itself sets this LimitedStream
            request._stream = LimitedStream(io.BytesIO(body), len(body))  # type: ignore[assignment]
        return self.get_response(request)

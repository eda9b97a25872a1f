"""Where a change comes from, for the audit log: set at the edges (the middleware for the API and
the admin, the platform's command base for commands), read by ``audit_record`` inside the
services. Work with no context (beat, the delivery loop, ``DelayedTask`` in user code) is the
platform's own and is not audited."""

from __future__ import annotations

import contextvars
import ipaddress
import re
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

from scheduling.core.caller import Caller
from scheduling.security.client_ip import client_ip

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")  # a caller's own id, kept when it is this plain
USER_AGENT_MAX = 512


@dataclass
class AuditContext:
    source: str  # AuditEvent.Source
    caller: Caller | None = None  # known at once (commands), or once the request is authenticated
    request: object = None  # the HttpRequest, whose user the admin's changes are made by
    ip: str | None = None
    user_agent: str = ""
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)


_current: contextvars.ContextVar[AuditContext | None] = contextvars.ContextVar("dp_audit", default=None)


def audit_context() -> AuditContext | None:
    return _current.get()


@contextmanager
def audited(context: AuditContext):
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


def request_id_of(request) -> str:
    given = request.META.get("HTTP_X_REQUEST_ID", "")
    return given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def _ip(text: str | None) -> str | None:
    try:
        return str(ipaddress.ip_address((text or "").split("%", 1)[0]))
    except ValueError:
        return None


class AuditContextMiddleware:
    """Gives every API and admin request an audit context (and an ``X-Request-ID`` answer header,
    the id its audit rows carry)."""

    SOURCES = (("/api/", "api"), ("/admin/", "admin"))

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        source = next((name for prefix, name in self.SOURCES if request.path.startswith(prefix)), None)
        if source is None:
            return self.get_response(request)
        context = AuditContext(source=source, request=request, ip=_ip(client_ip(request)),
                               user_agent=request.META.get("HTTP_USER_AGENT", "")[:USER_AGENT_MAX],
                               request_id=request_id_of(request))
        with audited(context):
            response = self.get_response(request)
        response["X-Request-ID"] = context.request_id
        return response

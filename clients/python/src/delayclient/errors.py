"""One hierarchy for everything the client raises, mapped from the API's answers.

    DelayError
    ├── APIError                 an answer with an error status
    │   ├── BadRequest      400  .fields: {"field": ["why", ...]}
    │   ├── Unauthorized    401
    │   ├── Forbidden       403
    │   ├── NotFound        404
    │   ├── Conflict        409
    │   ├── RateLimited     429  .retry_after (seconds)
    │   └── ServerError     5xx
    ├── TransportError           no answer: connection refused, reset, timed out
    └── WebhookError             a webhook that must not be trusted (receivers)
"""

from __future__ import annotations


class DelayError(Exception):
    """Anything the client raises."""


class APIError(DelayError):
    """The platform answered with an error status. ``detail`` is its message, ``body`` the
    decoded answer, ``request_id`` the ``X-Request-ID`` the platform's logs and audit record."""

    status: int = 0

    def __init__(self, message: str, *, status: int | None = None, body=None, request_id: str | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status
        self.detail = message
        self.body = body
        self.request_id = request_id

    def __str__(self) -> str:
        return f"{self.status}: {self.detail}"


class BadRequest(APIError):
    """400: the input was refused and nothing was stored. ``fields`` maps each field to its reasons
    (a bulk request's items under ``messages`` at their index)."""

    status = 400

    @property
    def fields(self) -> dict:
        return self.body if isinstance(self.body, dict) else {}


class Unauthorized(APIError):
    """401: no key, or an unknown, revoked or expired one."""

    status = 401


class Forbidden(APIError):
    """403: the key lacks a scope or its user a role, or a quota is reached."""

    status = 403


class NotFound(APIError):
    """404: not in your teams (another team's object answers the same), or pruned."""

    status = 404


class Conflict(APIError):
    """409: the object's state does not allow it (cancelling a delivered message)."""

    status = 409


class RateLimited(APIError):
    """429: over a rate; ``retry_after`` is the wait the platform asked for, in seconds."""

    status = 429

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ServerError(APIError):
    """5xx: the platform (or a proxy in front of it) failed."""

    status = 500


class TransportError(DelayError):
    """No answer: the connection failed or the deadline passed."""


class WebhookError(DelayError):
    """A webhook request that must not be trusted: a bad or missing signature, an old or future
    timestamp, a malformed body."""


class WebhookReplayed(WebhookError):
    """A webhook id already handled: the platform delivers at least once, so receivers answer it
    as done without handling it again."""


BY_STATUS = {cls.status: cls for cls in (BadRequest, Unauthorized, Forbidden, NotFound, Conflict, RateLimited)}


def error_for(status: int) -> type[APIError]:
    if status >= 500:
        return ServerError
    return BY_STATUS.get(status, APIError)

"""The delay platform's Python client: schedule messages and Celery tasks from any codebase, and
verify the platform's webhooks. Docs: the platform's docs site, "Python client"."""

from . import errors, models
from ._transport import Retry
from ._version import __version__
from .client import AsyncClient, Client
from .errors import (
    APIError,
    BadRequest,
    Conflict,
    DelayError,
    Forbidden,
    NotFound,
    RateLimited,
    ServerError,
    TransportError,
    Unauthorized,
    WebhookError,
    WebhookReplayed,
)
from .resources import UNSET, routes

__all__ = [
    "UNSET",
    "APIError",
    "AsyncClient",
    "BadRequest",
    "Client",
    "Conflict",
    "DelayError",
    "Forbidden",
    "NotFound",
    "RateLimited",
    "Retry",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "WebhookError",
    "WebhookReplayed",
    "__version__",
    "errors",
    "models",
    "routes",
]

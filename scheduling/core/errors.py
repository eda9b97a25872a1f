"""Errors services raise for callers to turn into a 4xx/5xx or a one-line message.

Field-level input problems are django ``ValidationError``s with a field -> messages dict."""


class ServiceError(Exception):
    status_code = 400


class Forbidden(ServiceError):
    """The caller may not do this (its role or its key's scopes): only ever about its own teams'
    objects, whose existence it may know; another team's object is NotFound."""

    status_code = 403


class QuotaExceeded(Forbidden):
    """A count quota of the team (endpoints, schedules, messages in flight) would be passed."""


class NotFound(ServiceError):
    status_code = 404


class Conflict(ServiceError):
    """The request is valid but the object's state does not allow it (e.g. cancel delivered)."""

    status_code = 409


class Unavailable(ServiceError):
    """A service the operation needs (RabbitMQ) is down; nothing was stored."""

    status_code = 503


class BulkValidationError(ServiceError):
    """Per-item field errors of an all-or-nothing bulk request: {index: {field: [msg]}}."""

    def __init__(self, errors: dict[int, dict[str, list[str]]], total: int):
        self.errors = errors
        self.total = total
        super().__init__(f"{len(errors)} invalid message(s)")

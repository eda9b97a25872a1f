"""Writing the audit log: ``audit_record`` inside the transaction of the change it records (both
commit or neither), with who, the team, the values before and after (secrets redacted), and the
request's address, user agent and id. Outside any context (the platform's own work) it writes
nothing; see audit/context.py."""

from __future__ import annotations

import datetime
import decimal
import uuid

from django.db import models

from scheduling.audit.context import audit_context
from scheduling.core.caller import Caller
from scheduling.models import AuditEvent
from scheduling.security.redaction import url_redacted

REDACTED = "<redacted>"
# fields never written in clear: secrets, key digests, passwords
SECRET_FIELDS = frozenset({"webhook_secret", "webhook_secret_previous", "digest", "password", "secret", "key"})
# fields that may hold a URL whose query string or userinfo carries a secret: kept redacted
URL_FIELDS = frozenset({"handler_target", "url", "webhook_url"})


def _redacted(values: dict | None) -> dict | None:
    """``values`` with URLs' query values, userinfo and fragment masked (security/redaction.py),
    whoever built the dict: audit_values, or a service's own before/after."""
    if not isinstance(values, dict):
        return values
    return {name: url_redacted(value) if name in URL_FIELDS and isinstance(value, str) else value
            for name, value in values.items()}


def _plain(value):
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, models.Model):
        return str(value)
    return value


def audit_values(*, obj: models.Model, fields=None) -> dict:
    """A row's values as JSON (foreign keys as their ids), secrets replaced by ``<redacted>`` (or
    "" when empty: whether a secret is set is itself worth seeing)."""
    values = {}
    for field in obj._meta.concrete_fields:
        if fields is not None and field.name not in fields:
            continue
        value = getattr(obj, field.attname)
        if field.name in SECRET_FIELDS:
            value = REDACTED if value else ""
        values[field.name] = _plain(value)
    return _redacted(values)


UNCHANGING = frozenset({"updated_at"})  # a save's own stamp, not a change anyone made


def audit_changed(*, before: dict, after: dict) -> tuple[dict, dict]:
    """Only what differs, both sides (an update's audit row names what it changed)."""
    keys = [k for k in after if k not in UNCHANGING and before.get(k) != after.get(k)]
    return {k: before.get(k) for k in keys}, {k: after[k] for k in keys}


def _actor(context) -> tuple[str, int | None, str]:
    caller: Caller | None = context.caller
    if caller is not None:
        return caller.name, caller.user_id, caller.key_prefix
    user = getattr(context.request, "user", None)
    if user is not None and user.is_authenticated:
        key = getattr(context.request, "auth", None)
        prefix = getattr(key, "prefix", "") or ""
        return user.get_username() + (f" (key {prefix})" if prefix else ""), user.pk, prefix
    return "anonymous", None, ""


def audit_record(*, action: str, obj: models.Model | None = None, team=None, before: dict | None = None,
                 after: dict | None = None, extra: dict | None = None, object_type: str = "",
                 object_id: str = "", object_repr: str = "") -> AuditEvent | None:
    """One row for one change; None when no edge is recording (the platform's own work)."""
    context = audit_context()
    if context is None:
        return None
    actor, user_id, key_prefix = _actor(context)
    if obj is not None:
        object_type = object_type or obj._meta.model_name
        object_id = object_id or str(obj.pk)
        object_repr = object_repr or str(obj)
    return AuditEvent.objects.create(
        source=context.source, actor=actor[:200], user_id=user_id, key_prefix=key_prefix,
        team_id=getattr(team, "pk", None), team_name=getattr(team, "name", "") or "",
        action=action, object_type=object_type, object_id=object_id[:100], object_repr=object_repr[:200],
        before=_plain(_redacted(before)) if before is not None else None,
        after=_plain(_redacted(after)) if after is not None else None,
        extra=_plain(extra) if extra is not None else None,
        ip=context.ip, user_agent=context.user_agent, request_id=context.request_id,
    )

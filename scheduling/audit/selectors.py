"""Reading the audit log: a team's admins read their team's rows, operators every row (the
platform's own too: teams made, quotas changed)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from ..teams.caller import Caller
from ..teams.roles import Action
from .models import AuditEvent


def audit_list(*, caller: Caller, team: str | None = None, action: str | None = None,
               object_type: str | None = None, object_id: str | None = None, since: datetime | None = None,
               until: datetime | None = None) -> QuerySet:
    rows = AuditEvent.objects.all()
    teams = caller.team_ids(Action.AUDIT)
    if teams is not None:
        rows = rows.filter(team_id__in=teams)
    for field, value in (("team_name", team), ("action", action), ("object_type", object_type),
                         ("object_id", object_id), ("at__gte", since), ("at__lt", until)):
        if value not in (None, ""):
            rows = rows.filter(**{field: value})
    return rows.order_by("-at", "-id")


def audit_list_past_retention(*, cutoff: datetime) -> QuerySet:
    """Rows made before ``cutoff`` (now - DELAY_AUDIT_RETENTION): the prune archives and deletes them."""
    return AuditEvent.objects.filter(at__lt=cutoff).order_by()

"""Reading the audit log: a team's admins read their team's rows, operators every row (the
platform's own too: teams made, quotas changed)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet

from scheduling.audit import actions
from scheduling.core.caller import Caller
from scheduling.core.roles import Action
from scheduling.models import AuditEvent


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


# One message's own events: as many as the API's traffic. They stay as long as the messages do
# (DELAY_RETENTION, DELAY_FAILED_RETENTION), not the changes' DELAY_AUDIT_RETENTION: a row per
# scheduling request kept 400 days would outgrow the messages table many times over.
TRAFFIC_ACTIONS = (actions.MESSAGE_SCHEDULE, actions.MESSAGE_SCHEDULE_BULK, actions.MESSAGE_CANCEL,
                   actions.MESSAGE_REPUBLISH, actions.MESSAGE_RESCHEDULE, actions.MESSAGE_RESEND)


def audit_list_past_retention(*, cutoff: datetime, traffic_cutoff: datetime | None = None) -> QuerySet:
    """Rows made before ``cutoff`` (now - DELAY_AUDIT_RETENTION), and a message's own events
    (TRAFFIC_ACTIONS) made before ``traffic_cutoff``: the prune archives and deletes them."""
    past = Q(at__lt=cutoff)
    if traffic_cutoff is not None and traffic_cutoff > cutoff:
        past |= Q(action__in=TRAFFIC_ACTIONS, at__lt=traffic_cutoff)
    return AuditEvent.objects.filter(past).order_by()

"""Notifications and callbacks as messages (issue 48; docs/guides/notifications.md).

A fact (a handler gave up, an endpoint was disabled, a quota crossed 80 %...) becomes one message
per endpoint that takes it: the team's routes for that type, or a message's own ``on_delivered`` /
``on_failed`` endpoint. Each is an ordinary row (delay 0, ``notification`` = its type), written
pending in the transaction of the fact it reports (outbox.py: the rows and what each fact says)
and published after the commit here (or by the sweeper), so a webhook endpoint gets it signed,
retried and in its attempts log. Nothing here raises into the delivery path.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from scheduling.audit.actions import NOTIFICATION_ROUTE_CREATE, NOTIFICATION_ROUTE_DELETE
from scheduling.audit.services import audit_record
from scheduling.messages.relay import relay_publish_rows
from scheduling.models import Endpoint
from scheduling.notifications.models import ROUTABLE, NotificationRoute, NotificationType, QuotaWarning
from scheduling.notifications.outbox import (
    TAKES_NOTIFICATIONS,
    Emitted,
    Fact,
    iso,
    notification_write,
    notification_write_ended,
)
from scheduling.teams.models import Team

log = logging.getLogger(__name__)

# the failed attempt in a row that sends message.attempt_failing (Svix's "attempt failing")
ATTEMPT_FAILING_AT = 4
# a team hears of a quota at 80 % at most once per quota in this long
QUOTA_WARNING_EVERY = timedelta(hours=1)
def _published(emitted: Emitted) -> Emitted:
    """Its rows published after the commit (never, if it rolls back: then they were never made)."""
    if emitted.rows:
        rows = emitted.rows
        transaction.on_commit(lambda: relay_publish_rows(rows=rows))
    return emitted


def notification_emit(*, facts: list[Fact]) -> Emitted:
    """Make each fact's messages in the caller's transaction (a savepoint: a failure here is logged
    and counted, never raised); published after the commit. Returns the rows made and how many the
    quota dropped."""
    return _published(notification_write(facts=facts))


def notification_emit_ended(*, delivered=(), failed=(), failing=(), expired=()) -> Emitted:
    """The facts of messages as their rows are now (outbox.notification_write_ended: ``failed``,
    their handler gave up; ``expired``, they just expired; ``failing``, an ATTEMPT_FAILING_AT-th
    failure in a row; ``delivered``, with an on_delivered callback), published after the commit."""
    return _published(notification_write_ended(delivered=delivered, failed=failed, failing=failing,
                                               expired=expired))


def notification_attempt_failing(*, attempts: int) -> bool:
    """Whether a message whose handler failed for the ``attempts``-th time in a row says so now."""
    return attempts == ATTEMPT_FAILING_AT


# --- the facts of endpoints and quotas -------------------------------------------------------------


def notification_endpoint_fact(*, type: str, endpoint: Endpoint, health=None) -> Fact:
    """An endpoint fact (endpoint.disabled, endpoint.circuit_opened) with its ``endpoint`` part."""
    part = {"name": endpoint.name, "handler": endpoint.handler, "is_active": endpoint.is_active,
            "disabled_at": iso(endpoint.disabled_at), "disabled_reason": endpoint.disabled_reason or None,
            "consecutive_failures": getattr(health, "consecutive_failures", None),
            "failing_since": iso(getattr(health, "failing_since", None)),
            "paused_until": iso(getattr(health, "paused_until", None))}
    return Fact(type, endpoint.team_id, endpoint=part, about_endpoint=endpoint.pk)


class _Checked:
    """Per process: (team id, quota) -> when QuotaWarning was last asked (monotonic), so that a team
    sitting above 80 % costs its requests one upsert a minute, not one each."""

    lock = threading.Lock()
    at: dict[tuple[int, str], float] = {}

    @classmethod
    def due(cls, team_id: int, quota: str) -> bool:
        now = time.monotonic()
        with cls.lock:
            if now - cls.at.get((team_id, quota), -60.0) < 60.0:
                return False
            cls.at[(team_id, quota)] = now
        return True


def notification_emit_quota_warnings(*, team: Team, warnings: list[tuple[str, int, int]]) -> Emitted:
    """quota.warning for each (quota, used, limit) at 80 % or more, at most once per team and quota
    per QUOTA_WARNING_EVERY across every process (QuotaWarning: an upsert that only takes when the
    last warning is older)."""
    facts = []
    for quota, used, limit in warnings:
        if not _Checked.due(team.pk, quota):
            continue
        now = timezone.now()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {QuotaWarning._meta.db_table} (team_id, quota, warned_at) VALUES (%s, %s, %s) "
                f"ON CONFLICT (team_id, quota) DO UPDATE SET warned_at = EXCLUDED.warned_at "
                f"WHERE {QuotaWarning._meta.db_table}.warned_at < %s RETURNING 1",
                [team.pk, quota, now, now - QUOTA_WARNING_EVERY])
            if cursor.fetchone() is None:
                continue
        facts.append(Fact(NotificationType.QUOTA_WARNING, team.pk, quota={
            "name": quota, "used": used, "limit": limit, "ratio": round(used / limit, 4) if limit else 1.0}))
    return notification_emit(facts=facts)


# --- routes ----------------------------------------------------------------------------------------


def notification_route_create(*, team: Team, endpoint: str, events: list[str]) -> NotificationRoute:
    """A route to the team's own ``endpoint`` (by name) for ``events`` (ROUTABLE values): a
    ValidationError on ``endpoint`` (not the team's, a Celery queue, already routed) or ``events``
    (empty, or naming an unknown type). Audited in its transaction."""
    errors = {}
    unknown = [e for e in events if e not in ROUTABLE]
    if not events:
        errors["events"] = f"give at least one of {', '.join(ROUTABLE)}"
    elif unknown:
        errors["events"] = f"unknown notification type {unknown[0]!r}; types: {', '.join(ROUTABLE)}"
    found = Endpoint.objects.filter(team=team, name=endpoint).first()
    if found is None:
        errors["endpoint"] = f"unknown endpoint {endpoint!r} in team {team.name!r}"
    elif found.handler not in TAKES_NOTIFICATIONS:
        errors["endpoint"] = (f"endpoint {endpoint!r} is a Celery queue: notifications go to a webhook or "
                              "record-only endpoint")
    elif NotificationRoute.objects.filter(endpoint=found).exists():
        errors["endpoint"] = f"endpoint {endpoint!r} already has a route: delete it first"
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        route = NotificationRoute.objects.create(team=team, endpoint=found, events=list(dict.fromkeys(events)))
        audit_record(action=NOTIFICATION_ROUTE_CREATE, obj=route, team=team,
                     after={"endpoint": found.name, "events": route.events})
    return route


def notification_route_delete(*, route: NotificationRoute) -> None:
    """Delete a route: its endpoint takes no more notifications (those made stay messages)."""
    with transaction.atomic():
        audit_record(action=NOTIFICATION_ROUTE_DELETE, obj=route, team=route.team,
                     before={"endpoint": route.endpoint.name, "events": route.events})
        route.delete()

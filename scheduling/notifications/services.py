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

from django.core.exceptions import ValidationError
from django.db import transaction

from scheduling.audit.actions import NOTIFICATION_ROUTE_CREATE, NOTIFICATION_ROUTE_DELETE
from scheduling.audit.services import audit_record
from scheduling.messages.notification_outbox import (
    TAKES_NOTIFICATIONS,
    Emitted,
    Fact,
    iso,
    notification_write_ended,
)
from scheduling.messages.notifying import notification_publish_after_commit
from scheduling.models import Endpoint, Team
from scheduling.models.notifications import ROUTABLE, NotificationRoute

log = logging.getLogger(__name__)

# the failed attempt in a row that sends message.attempt_failing (Svix's "attempt failing")
ATTEMPT_FAILING_AT = 4
def notification_emit_ended(*, delivered=(), failed=(), failing=(), expired=()) -> Emitted:
    """The facts of messages as their rows are now (outbox.notification_write_ended: ``failed``,
    their handler gave up; ``expired``, they just expired; ``failing``, an ATTEMPT_FAILING_AT-th
    failure in a row; ``delivered``, with an on_delivered callback), published after the commit."""
    return notification_publish_after_commit(notification_write_ended(delivered=delivered, failed=failed, failing=failing,
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

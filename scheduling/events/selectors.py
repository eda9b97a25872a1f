"""Reads of subscriptions and events (issue 48): lists newest first, a team's subscriptions for
matching, an event's messages."""

from __future__ import annotations

from django.db.models import QuerySet

from scheduling.models import Event, ScheduledMessage, Subscription


def subscription_list() -> QuerySet:
    """Every subscription with its endpoint and team, newest first (callers narrow to their teams)."""
    return Subscription.objects.select_related("team", "endpoint").order_by("-created_at", "-id")


def subscription_list_for_matching(*, team_id: int) -> list[Subscription]:
    """A team's subscriptions with what sending to their endpoints needs (its version, its team):
    all of them, a team has at most DELAY_TEAM_MAX_SUBSCRIPTIONS."""
    return list(Subscription.objects.select_related("endpoint__topology", "endpoint__team")
                .filter(team_id=team_id).order_by("created_at", "id"))


def subscription_count(*, team_id: int) -> int:
    return Subscription.objects.filter(team_id=team_id).count()


def event_list() -> QuerySet:
    """Every event with its team, newest first (callers narrow to their teams)."""
    return Event.objects.select_related("team").order_by("-created_at", "-id")


def event_list_messages(*, event_id) -> list[ScheduledMessage]:
    """The messages an event made, oldest first, with their endpoints (through the message_event index)."""
    return list(ScheduledMessage.objects.select_related("endpoint__team").filter(event_id=event_id)
                .order_by("created_at", "id"))

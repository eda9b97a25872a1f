"""Reads of notification routes (the API's list and detail, the admin's page)."""

from __future__ import annotations

from django.db.models import QuerySet

from scheduling.models import NotificationRoute


def notification_route_list() -> QuerySet:
    """Every route with its endpoint and team (narrowed to a caller's teams by the edges), newest first."""
    return NotificationRoute.objects.select_related("endpoint", "team").order_by("-created_at", "-id")

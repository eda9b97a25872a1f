"""Reads of recurring schedules."""

from __future__ import annotations

from scheduling.models import Schedule


def schedule_list():
    return Schedule.objects.select_related("endpoint").order_by("key")

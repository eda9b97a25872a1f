"""Notifications that the messages' own paths emit, below the notifications package: the outbox's
rows (notification_outbox.py) published through the relay after the commit, and the quota warnings
that scheduling raises as a team nears its limits. The routes and the facts of endpoints stay in
notifications/, which imports this."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from scheduling.messages.notification_outbox import Emitted, Fact, notification_write
from scheduling.messages.relay import relay_publish_rows
from scheduling.models import NotificationType, QuotaWarning, Team

# a team hears of a quota at 80 % at most once per quota in this long
QUOTA_WARNING_EVERY = timedelta(hours=1)


def notification_publish_after_commit(emitted: Emitted) -> Emitted:
    """Its rows published after the commit (never, if it rolls back: then they were never made)."""
    if emitted.rows:
        rows = emitted.rows
        transaction.on_commit(lambda: relay_publish_rows(rows=rows))
    return emitted


def notification_emit(*, facts: list[Fact]) -> Emitted:
    """Make each fact's messages in the caller's transaction (a savepoint: a failure here is logged
    and counted, never raised); published after the commit. Returns the rows made and how many the
    quota dropped."""
    return notification_publish_after_commit(notification_write(facts=facts))


class QuotaWarningsAsked:
    """Per process: (team id, quota) -> when QuotaWarning was last asked (monotonic), so that a team
    sitting above 80 % costs its requests one upsert a minute, not one each."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at: dict[tuple[int, str], float] = {}

    def due(self, team_id: int, quota: str) -> bool:
        now = time.monotonic()
        with self.lock:
            if now - self.at.get((team_id, quota), -60.0) < 60.0:
                return False
            self.at[(team_id, quota)] = now
        return True


quota_warnings_asked = QuotaWarningsAsked()


def notification_emit_quota_warnings(*, team: Team, warnings: list[tuple[str, int, int]]) -> Emitted:
    """quota.warning for each (quota, used, limit) at 80 % or more, at most once per team and quota
    per QUOTA_WARNING_EVERY across every process (QuotaWarning: an upsert that only takes when the
    last warning is older)."""
    facts = []
    for quota, used, limit in warnings:
        if not quota_warnings_asked.due(team.pk, quota):
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

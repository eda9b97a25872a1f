"""Reads of what the delivery keeps beside the messages: the copies set aside with no row."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from scheduling.models import OrphanCopy


def _since(since: datetime | None):
    rows = OrphanCopy.objects.all()
    return rows if since is None else rows.filter(last_seen_at__gte=since)


def orphan_copy_count(*, since: datetime | None = None, before: datetime | None = None) -> int:
    """Copies with no row set aside (last seen since ``since``, or before ``before``: past their
    retention, what the prune deletes)."""
    rows = _since(since)
    return (rows if before is None else rows.filter(last_seen_at__lt=before)).count()


def orphan_copy_list(*, since: datetime | None = None, team_id: int | None = None,
                     chunk: int = 1000) -> Iterator[dict]:
    """Every copy set aside (seen since ``since``; of one team's queues), oldest first, as the
    export writes it: what the copy carried and where it came from, the team and endpoint by name
    (None: the queue is no endpoint's)."""
    rows = _since(since) if team_id is None else _since(since).filter(team_id=team_id)
    rows = (rows.order_by("first_seen_at", "id")
            .values("message_id", "attempt", "queue", "endpoint__name", "team__name", "due_at", "published_at",
                    "version", "task", "headers", "body", "first_seen_at", "last_seen_at", "times_seen",
                    "received_by"))
    for row in rows.iterator(chunk_size=chunk):
        yield {**{k: v for k, v in row.items() if k not in ("endpoint__name", "team__name")},
               "endpoint": row["endpoint__name"], "team": row["team__name"]}

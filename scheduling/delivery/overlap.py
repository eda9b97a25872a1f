"""Recurring schedules' overlap (issue 49; core/ordering.py): a run skipped by its schedule's policy
is counted on its schedule (``runs_overlap_skipped``) and in a metric.

The count is written after the delivery's commit, in a statement of its own: the delivery path locks
message rows then turn rows, and a schedule's change locks its schedule row then its runs (to cancel
them); writing the schedule row inside the delivery's transaction would take the two in opposite
orders. A count lost with a crash between the two commits is the price (the skipped runs stay
listed: ``?schedule=<key>&status=skipped``).
"""

from __future__ import annotations

import logging
from collections import Counter

from django.db import connection, transaction

from scheduling.models import Endpoint, Schedule
from scheduling.observability import metrics

log = logging.getLogger(__name__)

_COUNT = f"""
UPDATE {Schedule._meta.db_table} AS s SET runs_overlap_skipped = s.runs_overlap_skipped + c.n
FROM unnest(%s::bigint[], %s::text[], %s::bigint[]) AS c(endpoint_id, key, n)
JOIN {Endpoint._meta.db_table} e ON e.id = c.endpoint_id
WHERE s.team_id = e.team_id AND s.key = c.key
"""


def schedule_count_overlap_skipped(*, runs: list) -> list:
    """Runs just skipped by their overlap policy (in the caller's transaction): their schedules'
    counters are raised once it commits. Returns what the metric counts (recorded by the caller)."""
    per_schedule = Counter((run.endpoint_id, run.schedule) for run in runs if run.schedule)
    if per_schedule:
        transaction.on_commit(lambda: _count(per_schedule))
    return [metrics.Counted(metrics.SCHEDULE_RUNS_OVERLAP_SKIPPED, run) for run in runs]


def _count(per_schedule: Counter) -> None:
    items = sorted(per_schedule.items())
    try:
        with connection.cursor() as cursor:
            cursor.execute(_COUNT, [[e for (e, _), _ in items], [k for (_, k), _ in items], [n for _, n in items]])
    except Exception:  # a count, not the outcome: the runs are skipped and listed either way
        log.exception("overlap: the schedules' runs_overlap_skipped were not raised")

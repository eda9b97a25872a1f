"""Reads of the cascade versions' rows, and how many of a version's messages wait in each level
(the database's view; the broker's is versions/broker.py)."""

from __future__ import annotations

from datetime import datetime

from django.db import OperationalError, connection, transaction

from scheduling.config.conf import conf
from scheduling.core.lifecycle import Status
from scheduling.models import TopologyVersion


def topology_version_list():
    return TopologyVersion.objects.all()


def topology_version_get(*, name: str) -> TopologyVersion | None:
    return TopologyVersion.objects.filter(name=name).first()


def topology_version_get_default() -> TopologyVersion | None:
    """The version new endpoints get when they name none: DELAY_DEFAULT_VERSION (v3) once it is
    provisioned; until then the newest provisioned version, so that an upgrade never makes
    creating endpoints fail before ``provision_delays`` has run for the new default."""
    configured = topology_version_get(name=conf().default_version)
    if configured is None or configured.provisioned_at is not None:
        return configured
    return topology_version_list_provisioned().order_by("-name").first() or configured


def topology_version_list_provisioned():
    return TopologyVersion.objects.filter(provisioned_at__isnull=False)


LEVEL_COUNT_TIMEOUT_MS = 2000  # the admin page's bound: a version with too many rows in flight shows no figure

_MESSAGES_BY_LEVEL_SQL = f"""
    WITH carried AS (  -- each row with the first due time of the broker message it went in (its envelope's)
        SELECT published_at,
               min(due_at) OVER (PARTITION BY endpoint_id, published_at, date_trunc('second', due_at)) AS first_due
        FROM scheduling_scheduledmessage
        WHERE topology_id = %(version)s AND status = '{Status.PUBLISHED.value}' AND attempts = 0 AND published_at IS NOT NULL
    ), timed AS (
        SELECT greatest(0, least(%(max_units)s, floor(
                   (extract(epoch FROM first_due - published_at) * 1000 - %(margin_ms)s) / %(unit_ms)s)))::bigint AS units,
               floor(extract(epoch FROM %(now)s - published_at) * 1000 / %(unit_ms)s)::bigint AS elapsed
        FROM carried
    )
    SELECT CASE WHEN elapsed < units THEN floor(log(2, (units # elapsed)::numeric))::int END AS level, count(*)
    FROM timed GROUP BY 1
"""


def topology_count_messages_by_level(*, version: TopologyVersion, now: datetime) -> dict[int | None, int] | None:
    """Level -> messages the rows say are in it now (None: past the last level, on their way to the
    endpoint), or None when counting took longer than LEVEL_COUNT_TIMEOUT_MS. The broker counts
    broker messages; with envelopes one carries many, so this is what the levels hold in messages.

    A message's broker message entered the cascade with ``units`` of delay; ``elapsed`` units later
    it is in the level of the highest bit where the two differ (the levels spend the set bits
    highest first: elapsed agrees with units above that level, and has not yet spent its bit).
    From the rows' publish and due times and the current arrival margin: a row published again
    (a retry, a rescue, a move) may be counted where its first copy would be."""
    plan = version.cascade
    params = {"version": version.id, "max_units": plan.max_delay_units, "margin_ms": conf().arrival_margin_ms,
              "unit_ms": plan.unit_ms, "now": now}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL statement_timeout = {LEVEL_COUNT_TIMEOUT_MS}")
        try:
            with transaction.atomic():
                cursor.execute(_MESSAGES_BY_LEVEL_SQL, params)
                return dict(cursor.fetchall())
        except OperationalError:  # cancelled by the timeout: too many rows in flight to count here
            return None

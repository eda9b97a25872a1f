"""The dashboard's delivery figures, kept as deliveries happen: a row per minute and lateness
bucket (DeliveryMinute), added to in the transaction that records the deliveries, so the figures
are exactly the messages recorded delivered. At 1,000 deliveries a second the dashboard's 24-hour
chart read 86 M messages; it now reads at most 1,440 minutes x the buckets used.

Two writers, the same figures: ``delivery_minute_record`` counts rows the caller has in Python
(the one-by-one path, the Celery task claim, webhook results); ``delivery_minute_upsert_sql`` is
the same upsert in SQL, for a statement that records deliveries and counts them at once (the
record-only batch: delivery/services.py), with the bucket computed as ``bucket_ms`` does."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from scheduling.core.lateness_buckets import EXACT_BELOW_MS, SIGNIFICANT_BITS, bucket_ms
from scheduling.models import DeliveryMinute, Endpoint

SHARDS = 16  # rows per minute and bucket that concurrent writers spread over (by their connection)
KEEP = timedelta(days=2)  # the dashboard reads 24 hours
_pruned_at = [time.monotonic()]  # this process's last prune (or its start): one at most every 10 minutes


def _teams_of(messages) -> dict[int, int]:
    """Endpoint id -> team id: what the delivery batch loaded with its rows (``endpoint_team_id``),
    else one query."""
    teams = {m.endpoint_id: m.endpoint_team_id for m in messages if getattr(m, "endpoint_team_id", None)}
    if missing := {m.endpoint_id for m in messages} - teams.keys():
        teams.update(Endpoint.objects.filter(id__in=missing).values_list("id", "team_id"))
    return teams


assert EXACT_BELOW_MS == 2**SIGNIFICANT_BITS  # delivery_minute_bucket_sql's shortcut: below it, a value is its bucket


def delivery_minute_bucket_sql(*, value: str) -> str:
    """lateness_buckets.bucket_ms of the bigint SQL expression ``value``, exactly: below 128 the
    value, above it the value with all but its 7 significant bits cleared. The bit length is read
    off the value's 64-bit string (65 - the position of its first 1), so no floating-point log."""
    shift = f"({65 - SIGNIFICANT_BITS} - position('1' IN ({value})::bit(64)::text))"
    return f"(CASE WHEN {value} < {EXACT_BELOW_MS} THEN {value} ELSE {value} >> {shift} << {shift} END)"


def delivery_minute_upsert_sql(*, source: str) -> str:
    """The upsert of delivery_minute_record as one SQL statement over ``source`` (a CTE or table
    with delivered_at, lateness_ms and team_id per message delivered), for a data-modifying CTE.
    Minutes in UTC, as ``delivered_at.replace(second=0, microsecond=0)``; rows written in (minute,
    team, bucket) order, as delivery_minute_record's. Literal ``%`` doubled: the statement takes
    parameters."""
    table = DeliveryMinute._meta.db_table
    return (f"INSERT INTO {table} (minute, team_id, shard, bucket_ms, deliveries, lateness_max_ms) "
            f"SELECT date_trunc('minute', s.delivered_at, 'UTC'), s.team_id, pg_backend_pid() %% {SHARDS}, "
            f"{delivery_minute_bucket_sql(value='s.lateness_ms')}, count(*), max(s.lateness_ms) FROM {source} AS s "
            f"WHERE s.delivered_at IS NOT NULL AND s.lateness_ms IS NOT NULL "
            f"GROUP BY 1, 2, 4 ORDER BY 1, 2, 4 "
            f"ON CONFLICT (minute, team_id, shard, bucket_ms) DO UPDATE SET "
            f"deliveries = {table}.deliveries + excluded.deliveries, "
            f"lateness_max_ms = greatest({table}.lateness_max_ms, excluded.lateness_max_ms)")


def delivery_minute_prune() -> None:
    """Drop minutes older than KEEP, at most once every 10 minutes per process (the writers call it)."""
    if time.monotonic() - _pruned_at[0] > 600:
        _pruned_at[0] = time.monotonic()
        DeliveryMinute.objects.filter(minute__lt=timezone.now() - KEEP).delete()


def delivery_minute_record(*, messages: Iterable) -> None:
    """Count messages just recorded delivered (each with delivered_at and lateness_ms) in their
    minute and lateness bucket; in the caller's transaction. One statement per batch; rows are
    written in (minute, bucket) order, so two writers on one shard wait for each other's commit
    but never deadlock."""
    counts: Counter = Counter()
    largest: dict[tuple, int] = {}
    messages = [m for m in messages if m.delivered_at is not None and m.lateness_ms is not None]
    teams = _teams_of(messages)
    for message in messages:
        key = (message.delivered_at.replace(second=0, microsecond=0), teams[message.endpoint_id],
               bucket_ms(message.lateness_ms))
        counts[key] += 1
        largest[key] = max(largest.get(key, message.lateness_ms), message.lateness_ms)
    if not counts:
        return
    keys = sorted(counts)
    table = DeliveryMinute._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (minute, team_id, shard, bucket_ms, deliveries, lateness_max_ms) "
            f"SELECT v.minute, v.team_id, pg_backend_pid() %% {SHARDS}, v.bucket_ms, v.n, v.largest "
            f"FROM unnest(%s::timestamptz[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[]) "
            f"AS v(minute, team_id, bucket_ms, n, largest) "
            f"ORDER BY v.minute, v.team_id, v.bucket_ms "
            f"ON CONFLICT (minute, team_id, shard, bucket_ms) DO UPDATE SET "
            f"deliveries = {table}.deliveries + excluded.deliveries, "
            f"lateness_max_ms = greatest({table}.lateness_max_ms, excluded.lateness_max_ms)",
            [[m for m, _, _ in keys], [t for _, t, _ in keys], [b for _, _, b in keys], [counts[k] for k in keys],
             [largest[k] for k in keys]])
    delivery_minute_prune()

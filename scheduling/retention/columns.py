"""The columns of a message row in Parquet: every column of ScheduledMessage, with its endpoint's
and version's names beside their ids, its endpoint's team's name (files written before teams have
no ``team``: their messages were the ``default`` team's), the shard its id travels on, the
payload as JSON text (null where DELAY_ARCHIVE_PAYLOADS is off), and its attempts
(MessageAttempt rows) as ``attempt_log``, a JSON array in the order they were made (null: none;
files written before attempts were kept have no such column). Files carry no ``due_date``
column: it is the partition directory (``due_date=YYYY-MM-DD``), the day the accuracy report
counts a message on: the date (UTC) of the later of its due time and the time it was accepted."""

from __future__ import annotations

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")

M, E, T = '"scheduling_scheduledmessage"', '"scheduling_endpoint"', '"scheduling_topologyversion"'
TM = '"scheduling_team"'
A = '"scheduling_messageattempt"'
# A message's attempts, one JSON array (read by the attempts' index, message then started_at): a
# column of the message's own row, so that a message and its attempts are archived, listed and
# expired as one. Its timestamps are ISO 8601 in UTC (the COPY sets the session's zone).
ATTEMPTS_SQL = (
    f"""(SELECT json_agg(json_build_object('number', a."number", 'trigger', a."trigger", """
    f"""'started_at', a."started_at", 'duration_ms', a."duration_ms", 'outcome', a."outcome", """
    f"""'status_code', a."status_code", 'excerpt', a."excerpt", 'worker', a."worker") """
    f"""ORDER BY a."started_at", a."id")::text FROM {A} a WHERE a."message_id" = {M}."id")""")
# column -> (SQL over the message table M, its endpoint E, its version T, its endpoint's team TM;
# Arrow type)
COLUMNS: dict[str, tuple[str, pa.DataType]] = {
    "id": (f'{M}."id"', pa.string()),
    "team": (f'{TM}."name"', pa.string()),
    "endpoint": (f'{E}."name"', pa.string()),
    "endpoint_id": (f'{M}."endpoint_id"', pa.int64()),
    "version": (f'{T}."name"', pa.string()),
    "topology_id": (f'{M}."topology_id"', pa.int64()),
    "delivery_mode": (f'{M}."delivery_mode"', pa.string()),
    "requested_delay_ms": (f'{M}."requested_delay_ms"', pa.int64()),
    "due_at": (f'{M}."due_at"', TIMESTAMP),
    "created_at": (f'{M}."created_at"', TIMESTAMP),
    "published_at": (f'{M}."published_at"', TIMESTAMP),
    "delivered_at": (f'{M}."delivered_at"', TIMESTAMP),
    "cancelled_at": (f'{M}."cancelled_at"', TIMESTAMP),
    "finished_at": (f'{M}."finished_at"', TIMESTAMP),
    "status": (f'{M}."status"', pa.string()),
    "lateness_ms": (f'{M}."lateness_ms"', pa.int64()),
    "throttled_ms": (f'{M}."throttled_ms"', pa.int64()),
    "delivery_count": (f'{M}."delivery_count"', pa.int32()),
    "attempts": (f'{M}."attempts"', pa.int32()),
    "delivered_by": (f'{M}."delivered_by"', pa.string()),
    "routing_key": (f'{M}."routing_key"', pa.string()),
    "first_exchange": (f'{M}."first_exchange"', pa.string()),
    "idempotency_key": (f'{M}."idempotency_key"', pa.string()),
    "last_error": (f'{M}."last_error"', pa.string()),
    "schedule": (f'{M}."schedule"', pa.string()),
    "due_history": (f'{M}."due_history"::text', pa.string()),
    "trigger": (f'{M}."trigger"', pa.string()),
    "call_lease_until": (f'{M}."call_lease_until"', TIMESTAMP),
    "payload_bytes": (f'{M}."payload_bytes"', pa.int64()),
    "captured_task": (f'{M}."captured_task"::int', pa.bool_()),  # 1/0, as the CSV reader takes booleans; files before 0023 have none
    "traceparent": (f'{M}."traceparent"', pa.string()),  # files before 0026 have none
    # fan-out and notifications (0028): files before it have none
    "event_id": (f'{M}."event_id"::text', pa.string()),
    "on_delivered_id": (f'{M}."on_delivered_id"', pa.int64()),
    "on_failed_id": (f'{M}."on_failed_id"', pa.int64()),
    "notification": (f'{M}."notification"', pa.string()),
    "expires_at": (f'{M}."expires_at"', TIMESTAMP),  # expiry (0030): files before it have none
    # debounce (0031): files before it have none
    "debounce_key": (f'{M}."debounce_key"', pa.string()),
    "debounce_mode": (f'{M}."debounce_mode"', pa.string()),
    "debounce_seconds": (f'{M}."debounce_seconds"', pa.int32()),
    "debounce_max_seconds": (f'{M}."debounce_max_seconds"', pa.int32()),
    "debounce_until": (f'{M}."debounce_until"', TIMESTAMP),
    "flow_key": (f'{M}."flow_key"', pa.string()),  # flow control by key (0032): files before it have none
    # ordering (0034): files before it have none
    "ordering_key": (f'{M}."ordering_key"', pa.string()),
    "waiting_since": (f'{M}."waiting_since"', TIMESTAMP),
    "overlap": (f'{M}."overlap"', pa.string()),  # a schedule's run's overlap policy (0035): files before it have none
    "payload": (f'{M}."payload"::text', pa.string()),
    "attempt_log": (ATTEMPTS_SQL, pa.string()),
}
NO_PAYLOAD_SQL = "NULL::text"
# Computed from a row after reading it: the shard of its version its id picks (with the shard
# counts configured when it was written), so deliveries of every shard can be told apart.
DERIVED: dict[str, pa.DataType] = {"shard": pa.int32()}
SCHEMA = pa.schema([pa.field(name, kind) for name, (_, kind) in COLUMNS.items()]
                   + [pa.field(name, kind) for name, kind in DERIVED.items()])

DAY_COLUMN = "due_date"
DAY_SQL = f"""(greatest({M}."due_at", {M}."created_at") AT TIME ZONE 'UTC')::date"""
FROM_SQL = (f'{M} JOIN {E} ON {E}."id" = {M}."endpoint_id" JOIN {T} ON {T}."id" = {M}."topology_id" '
            f'JOIN {TM} ON {TM}."id" = {E}."team_id"')


def select_sql(*, where: str, payloads: bool, attempts: bool = True) -> str:
    """The rows of ``where`` in COLUMNS' order, then their day (read to split a batch by day);
    ``payloads`` and ``attempts`` off: those columns null (the accuracy report reads neither)."""
    left_out = {name for name, given in (("payload", payloads), ("attempt_log", attempts)) if not given}
    columns = [f'{NO_PAYLOAD_SQL if name in left_out else sql} AS "{name}"' for name, (sql, _) in COLUMNS.items()]
    return f"SELECT {', '.join(columns)}, {DAY_SQL} AS {DAY_COLUMN} FROM {FROM_SQL} WHERE {where}"


def partition_name(day) -> str:
    return f"{DAY_COLUMN}={day.isoformat()}"

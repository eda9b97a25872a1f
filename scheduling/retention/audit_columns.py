"""The columns of an audit row in Parquet: every column of AuditEvent as the table has it, the
JSON ones (``before``, ``after``, ``extra``) as JSON text and the address as plain text.

The audit archive is a directory of its own inside the archive, ``_audit``, one ``at_date=YYYY-MM-DD``
directory per day (the date, UTC, of ``at``; files carry no ``at_date`` column). Its name starts
with ``_`` because Spark, pyarrow and pandas skip such directories when they read a directory:
read as a whole, the archive stays the messages' (with ``audit/`` they refuse to read it: two
partition columns, two ``id`` types), and ``read_parquet(".../_audit")`` reads the audit log's."""

from __future__ import annotations

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")
A = '"scheduling_auditevent"'
# column -> (SQL over the audit table A; Arrow type)
COLUMNS: dict[str, tuple[str, pa.DataType]] = {
    "id": (f'{A}."id"', pa.int64()),
    "at": (f'{A}."at"', TIMESTAMP),
    "source": (f'{A}."source"', pa.string()),
    "actor": (f'{A}."actor"', pa.string()),
    "user_id": (f'{A}."user_id"', pa.int64()),
    "key_prefix": (f'{A}."key_prefix"', pa.string()),
    "team_id": (f'{A}."team_id"', pa.int64()),
    "team_name": (f'{A}."team_name"', pa.string()),
    "action": (f'{A}."action"', pa.string()),
    "object_type": (f'{A}."object_type"', pa.string()),
    "object_id": (f'{A}."object_id"', pa.string()),
    "object_repr": (f'{A}."object_repr"', pa.string()),
    "before": (f'{A}."before"::text', pa.string()),
    "after": (f'{A}."after"::text', pa.string()),
    "extra": (f'{A}."extra"::text', pa.string()),
    "ip": (f'host({A}."ip")', pa.string()),  # inet's text would add the mask (/32)
    "user_agent": (f'{A}."user_agent"', pa.string()),
    "request_id": (f'{A}."request_id"', pa.string()),
}
SCHEMA = pa.schema([pa.field(name, kind) for name, (_, kind) in COLUMNS.items()])

DIRECTORY = "_audit"
DAY_COLUMN = "at_date"
DAY_SQL = f"""({A}."at" AT TIME ZONE 'UTC')::date"""
KINDS = {name: kind for name, (_, kind) in COLUMNS.items()} | {DAY_COLUMN: pa.date32()}


def select_sql(*, where: str) -> str:
    """The rows of ``where`` (SQL over A) in COLUMNS' order, then their day."""
    columns = [f'{sql} AS "{name}"' for name, (sql, _) in COLUMNS.items()]
    return f"SELECT {', '.join(columns)}, {DAY_SQL} AS {DAY_COLUMN} FROM {A} WHERE {where}"


def partition_name(day) -> str:
    """Relative to the archive: ``_audit/at_date=YYYY-MM-DD``."""
    return f"{DIRECTORY}/{DAY_COLUMN}={day.isoformat()}"

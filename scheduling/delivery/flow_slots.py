"""Flow control's shared state, in PostgreSQL, so that every worker keeps one limit together
(docs/guides/flow-control.md; the delivery loop's side is core/flow_gate.py).

- The rate: an endpoint's next free hand-over slot (EndpointFlow). One statement reserves a run of
  slots for a loop and commits at once (the loop calls it outside a transaction); the time is the
  database's clock, and what comes back is a delay from now, so workers whose clocks disagree
  still space their hand-overs by the database's.
- The concurrency: an advisory lock per call in flight, released when the call ends, or by
  PostgreSQL when the worker's connection dies: no lease to expire, and no write per call. The
  webhook engine's calls run outside any transaction and hold session-level locks on the delivery
  loop's connection; the one-by-one path (the ``deliver`` task) a transaction-level one.
- By key (a message's flow_key): the same, per (endpoint, key). A key's next slot is a row of
  EndpointKeyFlow, taken by the same kind of statement, one per key and run of slots (no lock
  wider than the key's row: 10,000 keys are 10,000 independent rows). The table holds the keys
  limited lately: a row whose slot is KEY_FLOW_KEPT_SECONDS past says nothing a missing row would
  not (its next slot is now either way), and endpoint_key_flow_forget deletes such rows (each delivery loop,
  at its sync). A key's call slots are advisory locks in a space apart: (a 32-bit hash of endpoint
  id and key, KEY_LOCK_BASE + slot); two keys whose hashes meet share their slots (fewer calls,
  never more).
"""

from __future__ import annotations

import hashlib

from django.db import connection

from scheduling.core.flow_gate import Limit
from scheduling.models import EndpointFlow, EndpointKeyFlow

# The advisory locks of call slots: (endpoint id, CALL_LOCK_BASE + slot) in PostgreSQL's two-key
# space, which the prune's one-key lock does not share.
CALL_LOCK_BASE = int.from_bytes(b"dpc", "big") << 8
KEY_LOCK_BASE = int.from_bytes(b"dpk", "big") << 8  # a key's call slots (the first key its hash)
KEY_FLOW_KEPT_SECONDS = 60
NOW_US = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"


def endpoint_take_slots(*, limit: Limit, count: int, spacing_us: int) -> int:
    """Reserve ``count`` hand-over slots ``spacing_us`` apart for ``limit``'s endpoint; return how
    long from now the first one is (µs, 0 when the endpoint has no backlog)."""
    table = EndpointFlow._meta.db_table
    now_us = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} AS f (endpoint_id, next_slot_us) VALUES (%s, {now_us} + %s) "
            f"ON CONFLICT (endpoint_id) DO UPDATE SET next_slot_us = greatest(f.next_slot_us, {now_us}) + %s "
            f"RETURNING next_slot_us - %s - {now_us}",
            [limit.endpoint_id, count * spacing_us, count * spacing_us, count * spacing_us],
        )
        return max(0, cursor.fetchone()[0])


def endpoint_try_call_slot(*, endpoint_id: int, concurrent: int) -> bool:
    """Take one of the endpoint's ``concurrent`` call slots for the current transaction; False
    when every one is held (by this or any worker)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s FROM generate_series(0, %s - 1) AS s WHERE pg_try_advisory_xact_lock(%s, %s + s) LIMIT 1",
            [concurrent, endpoint_id, CALL_LOCK_BASE],
        )
        return cursor.fetchone() is not None


def endpoint_take_call_slots(*, endpoint_id: int, concurrent: int, held: list[int], count: int) -> list[int]:
    """Take up to ``count`` of the endpoint's ``concurrent`` call slots for calls made outside any
    transaction (the webhook engine): session-level advisory locks on this connection, skipping
    the ``held`` ones (a session may take its own lock again). Released by
    endpoint_release_call_slots, or by PostgreSQL when the connection ends (a worker killed)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s FROM generate_series(0, %s - 1) AS s "
            "WHERE NOT s = ANY(%s::int[]) AND pg_try_advisory_lock(%s, %s + s) LIMIT %s",
            [concurrent, list(held), endpoint_id, CALL_LOCK_BASE, count],
        )
        return [row[0] for row in cursor.fetchall()]


def endpoint_release_call_slots(*, endpoint_id: int, slots: list[int]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s, %s + s) FROM unnest(%s::int[]) AS s",
                       [endpoint_id, CALL_LOCK_BASE, slots])


# --- by key (a message's flow_key) ---------------------------------------------------------


def endpoint_key_take_slots(*, limit: Limit, key: str, count: int, spacing_us: int) -> int:
    """Reserve ``count`` hand-over slots ``spacing_us`` apart for ``key`` on ``limit``'s endpoint;
    return how long from now the first one is (µs, 0 when the key has no backlog)."""
    return endpoint_key_take_slots_many(limit=limit, counts={key: count}, spacing_us=spacing_us)[key]


def endpoint_key_take_slots_many(*, limit: Limit, counts: dict[str, int], spacing_us: int) -> dict[str, int]:
    """endpoint_key_take_slots for many keys of one endpoint in one statement (a batch of due
    messages of 500 keys: one round trip, not 500). Each key's row is locked alone, in key order
    (two loops taking overlapping keys wait for each other, never deadlock); the time is read once."""
    table = EndpointKeyFlow._meta.db_table
    keys = sorted(counts)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH n AS (SELECT {NOW_US} AS us) "
            f"INSERT INTO {table} AS f (endpoint_id, key, next_slot_us) "
            f"SELECT %s, u.k, (SELECT us FROM n) + u.c::bigint * %s FROM unnest(%s::text[], %s::int[]) AS u(k, c) "
            f"ORDER BY u.k "
            f"ON CONFLICT (endpoint_id, key) DO UPDATE SET next_slot_us = "
            f"greatest(f.next_slot_us, (SELECT us FROM n)) + (EXCLUDED.next_slot_us - (SELECT us FROM n)) "
            f"RETURNING key, next_slot_us, (SELECT us FROM n)",
            [limit.endpoint_id, spacing_us, keys, [counts[k] for k in keys]],
        )
        return {key: max(0, next_us - counts[key] * spacing_us - now_us) for key, next_us, now_us in cursor.fetchall()}


def endpoint_key_flow_forget(*, older_than_s: float = KEY_FLOW_KEPT_SECONDS) -> int:
    """Delete the key rows whose next slot is ``older_than_s`` past (their key would get a slot
    now either way): the table keeps the keys of the last minute, not every key ever limited."""
    table = EndpointKeyFlow._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE next_slot_us < {NOW_US} - %s", [int(older_than_s * 1_000_000)])
        return cursor.rowcount


def endpoint_key_lock_id(*, endpoint_id: int, key: str) -> int:
    """The first key of a flow key's call-slot locks: a signed 32-bit hash of endpoint and key."""
    digest = hashlib.blake2b(f"{endpoint_id}:{key}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def endpoint_key_try_call_slot(*, endpoint_id: int, key: str, concurrent: int) -> bool:
    """endpoint_try_call_slot for one flow key's slots (the one-by-one path: for its transaction)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s FROM generate_series(0, %s - 1) AS s WHERE pg_try_advisory_xact_lock(%s, %s + s) LIMIT 1",
            [concurrent, endpoint_key_lock_id(endpoint_id=endpoint_id, key=key), KEY_LOCK_BASE],
        )
        return cursor.fetchone() is not None


def endpoint_key_take_call_slots(*, endpoint_id: int, key: str, concurrent: int, held: list[int],
                                  count: int) -> list[int]:
    """endpoint_take_call_slots for one flow key's ``concurrent`` call slots (max_concurrent_per_key):
    session-level advisory locks on this connection, released by endpoint_key_release_call_slots or with it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s FROM generate_series(0, %s - 1) AS s "
            "WHERE NOT s = ANY(%s::int[]) AND pg_try_advisory_lock(%s, %s + s) LIMIT %s",
            [concurrent, list(held), endpoint_key_lock_id(endpoint_id=endpoint_id, key=key), KEY_LOCK_BASE, count],
        )
        return [row[0] for row in cursor.fetchall()]


def endpoint_key_release_call_slots(*, endpoint_id: int, key: str, slots: list[int]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s, %s + s) FROM unnest(%s::int[]) AS s",
                       [endpoint_key_lock_id(endpoint_id=endpoint_id, key=key), KEY_LOCK_BASE, slots])

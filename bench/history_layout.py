"""How to keep the messages table flat as history grows: the alternatives, measured side by side
on copies of the real table (same columns and indexes) in a throwaway database.

    .venv/bin/python bench/history_layout.py [--rows 10000000] [--lifecycle 500000]

A. Primary keys: UUIDv4 (random) against UUIDv7 (time-ordered). The platform inserts bulk
   requests through COPY; with the table already holding --rows rows, how fast do new rows go
   in, and how much WAL and index does each write? Both tables are written alternately, batch by
   batch, so noise from the rest of the machine falls on both.
B. Pruning: one table with batched DELETEs and autovacuum, against a table partitioned by the
   day a message finished (in-flight rows in a partition of their own, ``finished_at =
   'infinity'``; a row moves to its day's partition when it finishes; a day is pruned by dropping
   its partition). --lifecycle messages go through insert -> published -> delivered -> pruned in
   each; time and WAL per step, lookups by id, and what partitioning cannot keep (a unique
   idempotency key per endpoint across partitions).
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import django_env, idle_share, manage, throwaway_database  # noqa: E402

TABLE = "scheduling_scheduledmessage"
BATCH = 1000  # a bulk API request
COLUMNS = ("id", "endpoint_id", "topology_id", "delivery_mode", "payload", "due_at", "requested_delay_ms", "status",
           "routing_key", "first_exchange", "created_at", "published_at", "delivered_at", "delivered_by",
           "cancelled_at", "finished_at", "lateness_ms", "delivery_count", "attempts", "idempotency_key", "last_error")
PAYLOAD = '{"order": "%s", "customer": 4711, "lines": [{"sku": "A-100", "qty": 2}, {"sku": "B-7", "qty": 1}]}'
UUID7_SQL = """CREATE FUNCTION uuid7_at(ts timestamptz) RETURNS uuid LANGUAGE sql VOLATILE AS $$
  SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING
         substring(int8send(floor(extract(epoch FROM ts) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 52, 1), 53, 1),
         'hex')::uuid $$"""


def uuid7(at: datetime | None = None) -> uuid.UUID:
    ms = int((at or datetime.now(UTC)).timestamp() * 1000)
    value = (ms << 80) | (random.getrandbits(80))
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return uuid.UUID(int=value)


def step(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def wal(conn) -> int:
    return conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()[0]


def fill(conn, table: str, rows: int, id_sql: str) -> None:
    """Finished (delivered) rows accepted over the 7 days before now, in that order, as a table
    fills in service (chunks, progress lines)."""
    chunk = 1_000_000
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        conn.execute(f"""
            INSERT INTO {table} ({', '.join(COLUMNS)})
            SELECT {id_sql.format(ts='c')}, 1, 3, 'native', format('{PAYLOAD}', g)::jsonb, c + interval '30 s',
                   30000, 'delivered', 'orders', 'dp.v3.delay-level-04', c, c + interval '10 ms',
                   c + interval '30.004 s', 'celery@worker1', NULL, c + interval '30.004 s', 4, 1, 0, NULL, ''
            FROM (SELECT g, now() - interval '7 days' * ({rows} - g) / {rows} AS c
                  FROM generate_series({start}, {start + n - 1}) g) s""")  # in the order they were accepted
        step(f"  {table}: {start + n:,}/{rows:,} rows")
    conn.execute(f"VACUUM ANALYZE {table}")


def copy_rows(conn, table: str, ids: list, now: datetime, finished_at=None) -> None:
    """A bulk request's rows through COPY, as ScheduledMessageQuerySet.insert_many writes them
    (``finished_at``: the partitioned table's in-flight sentinel, 'infinity')."""
    with conn.cursor().copy(f"COPY {table} ({', '.join(COLUMNS)}) FROM STDIN") as copy:
        for message_id in ids:
            copy.write_row((message_id, 1, 3, "native", PAYLOAD % message_id, now + timedelta(hours=1), 3_600_000,
                            "pending", "", "", now, None, None, "", None, finished_at, None, 0, 0, None, ""))


# --- A: primary keys ---------------------------------------------------------------------------


def primary_keys(conn, rows: int, inserts: int) -> dict:
    tables = {"v4": "pk_v4", "v7": "pk_v7"}
    for table in tables.values():
        conn.execute(f"CREATE TABLE {table} (LIKE {TABLE} INCLUDING ALL)")
    result = {}
    for label in ("empty", f"{rows:,} rows"):
        if label != "empty":
            step(f"A: filling both tables to {rows:,} rows")
            fill(conn, tables["v4"], rows, "gen_random_uuid()")
            fill(conn, tables["v7"], rows, "uuid7_at({ts})")
        conn.execute("CHECKPOINT")  # both start from a clean buffer state
        seconds, wal_bytes = {"v4": 0.0, "v7": 0.0}, {"v4": 0, "v7": 0}
        for _ in range(inserts // BATCH):
            for kind, table in tables.items():
                ids = [uuid.uuid4() if kind == "v4" else uuid7() for _ in range(BATCH)]
                before, started = wal(conn), time.perf_counter()
                with conn.transaction():
                    copy_rows(conn, table, ids, datetime.now(UTC))
                seconds[kind] += time.perf_counter() - started
                wal_bytes[kind] += wal(conn) - before
        result[label] = {kind: {"rows_per_s": inserts / seconds[kind], "wal_bytes_per_row": wal_bytes[kind] / inserts}
                         for kind in tables}
        step(f"A {label}: " + ", ".join(f"{k} {v['rows_per_s']:,.0f} rows/s, {v['wal_bytes_per_row']:,.0f} WAL B/row"
                                        for k, v in result[label].items()))
    for kind, table in tables.items():
        size, density = conn.execute(f"SELECT pg_relation_size('{table}_pkey'), avg_leaf_density "
                                     f"FROM pgstatindex('{table}_pkey')").fetchone()
        result[f"pkey_{kind}"] = {"bytes": size, "leaf_density": density}
    for table in tables.values():
        conn.execute(f"DROP TABLE {table}")
    return result


# --- B: pruning -------------------------------------------------------------------------------


PARTITIONED = """
CREATE TABLE parted (LIKE {table} INCLUDING DEFAULTS) PARTITION BY RANGE (finished_at);
ALTER TABLE parted ALTER COLUMN finished_at SET NOT NULL;
ALTER TABLE parted ADD PRIMARY KEY (id, finished_at);
CREATE INDEX ON parted (status, created_at);
CREATE INDEX ON parted (endpoint_id, status);
CREATE INDEX ON parted (due_at);
CREATE TABLE parted_live PARTITION OF parted FOR VALUES FROM ('infinity') TO (MAXVALUE);
"""


def day_partitions(conn, days: int, now: datetime) -> None:
    for i in range(-days, 2):
        first = (now + timedelta(days=i)).date()
        conn.execute(f"CREATE TABLE parted_{first:%Y%m%d} PARTITION OF parted "
                     f"FOR VALUES FROM ('{first}') TO ('{first + timedelta(days=1)}')")


def lifecycle(conn, table: str, ids: list, *, live_finished_at=None) -> dict:
    """insert -> published -> delivered, a bulk request's worth at a time, as the platform does."""
    out = {}
    now = datetime.now(UTC)

    def measure(name, action):
        before, started = wal(conn), time.perf_counter()
        for i in range(0, len(ids), BATCH):
            with conn.transaction():
                action(ids[i:i + BATCH])
        out[name] = {"seconds": time.perf_counter() - started, "wal_bytes_per_row": (wal(conn) - before) / len(ids)}

    measure("insert", lambda batch: copy_rows(conn, table, batch, now, live_finished_at))
    measure("publish", lambda batch: conn.execute(
        f"UPDATE {table} SET status = 'published', published_at = now(), routing_key = 'orders' WHERE id = ANY(%s)",
        [batch]))
    measure("deliver", lambda batch: conn.execute(
        f"UPDATE {table} SET status = 'delivered', delivered_at = now(), finished_at = now(), lateness_ms = 4, "
        f"delivery_count = 1 WHERE id = ANY(%s)", [batch]))
    return out


def pruning(conn, messages: int) -> dict:
    conn.execute(f"CREATE TABLE flat (LIKE {TABLE} INCLUDING ALL)")
    conn.execute(PARTITIONED.format(table=TABLE))
    now = datetime.now(UTC)
    day_partitions(conn, 37, now)  # 7 days of delivered + 30 of failed ones, as the default retentions keep
    ids = [uuid7() for _ in range(messages)]
    step(f"B: {messages:,} messages through insert -> published -> delivered, flat table")
    flat = lifecycle(conn, "flat", ids)
    step("B: the same through the partitioned table (in flight: finished_at = infinity)")
    parted = lifecycle(conn, "parted", ids, live_finished_at="infinity")

    step("B: lookups by id (the delivery loop locks 500 rows by id)")
    sample = random.sample(ids, 500)
    lookups = {}
    for table in ("flat", "parted"):
        started = time.perf_counter()
        for _ in range(50):
            conn.execute(f"SELECT id FROM {table} WHERE id = ANY(%s)", [sample]).fetchall()
        lookups[table] = (time.perf_counter() - started) / 50 * 1000

    step("B: pruning the day: batched DELETE then VACUUM, against DROP of the day's partition")
    before, started = wal(conn), time.perf_counter()
    for i in range(0, len(ids), 100_000):
        with conn.transaction():
            conn.execute("DELETE FROM flat WHERE id = ANY(%s)", [ids[i:i + 100_000]])
    flat["prune"] = {"seconds": time.perf_counter() - started, "wal_bytes_per_row": (wal(conn) - before) / messages}
    started = time.perf_counter()
    conn.execute("VACUUM flat")
    flat["vacuum"] = {"seconds": time.perf_counter() - started}
    before, started = wal(conn), time.perf_counter()
    conn.execute(f"DROP TABLE parted_{now.date():%Y%m%d}")
    parted["prune"] = {"seconds": time.perf_counter() - started, "wal_bytes_per_row": (wal(conn) - before) / messages}
    try:
        conn.execute("CREATE UNIQUE INDEX ON parted (endpoint_id, idempotency_key) WHERE idempotency_key IS NOT NULL")
        unique = "allowed"
    except psycopg.Error as exc:
        unique = str(exc).splitlines()[0]
    return {"flat": flat, "parted": parted, "lookup_ms": lookups, "unique_idempotency_key": unique}


def print_results(a: dict, b: dict) -> None:
    print("\nA. primary key: inserting bulk requests (1,000 rows, COPY), the two tables written alternately")
    print("table holds      | v4 rows/s | v7 rows/s | v7/v4 | v4 WAL B/row | v7 WAL B/row")
    for label, r in a.items():
        if label.startswith("pkey"):
            continue
        print(f"{label:<16} | {r['v4']['rows_per_s']:>9,.0f} | {r['v7']['rows_per_s']:>9,.0f} | "
              f"{r['v7']['rows_per_s'] / r['v4']['rows_per_s']:>5.2f} | {r['v4']['wal_bytes_per_row']:>12,.0f} | "
              f"{r['v7']['wal_bytes_per_row']:>12,.0f}")
    for kind in ("v4", "v7"):
        key = a[f"pkey_{kind}"]
        print(f"primary key index {kind}: {key['bytes'] / 1e6:,.0f} MB, leaf pages {key['leaf_density']:.0f} % full")
    print("\nB. pruning: per message, flat table (DELETE + VACUUM) against partitions by finished day (DROP)")
    print("step     | flat s | flat WAL B/msg | partitioned s | partitioned WAL B/msg")
    for name in ("insert", "publish", "deliver", "prune"):
        f, p = b["flat"][name], b["parted"][name]
        print(f"{name:<8} | {f['seconds']:>6.1f} | {f['wal_bytes_per_row']:>14,.0f} | {p['seconds']:>13.2f} | "
              f"{p['wal_bytes_per_row']:>21,.0f}")
    print(f"vacuum after the DELETE: {b['flat']['vacuum']['seconds']:.1f} s (autovacuum's work; none for a DROP)")
    print(f"lock 500 rows by id: flat {b['lookup_ms']['flat']:.1f} ms, partitioned (39 partitions) "
          f"{b['lookup_ms']['parted']:.1f} ms")
    print(f"unique idempotency key per endpoint on the partitioned table: {b['unique_idempotency_key']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows already in the table for part A")
    parser.add_argument("--inserts", type=int, default=100_000, help="rows inserted per measurement in part A")
    parser.add_argument("--lifecycle", type=int, default=500_000, help="messages through each layout in part B")
    args = parser.parse_args()
    print(f"machine: {idle_share(2.0):.0%} idle before the run", flush=True)
    run_id = uuid.uuid4().hex[:8]
    with throwaway_database(run_id) as url:
        manage(django_env(run_id, url), "migrate", "--noinput")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
            conn.execute(UUID7_SQL)
            b = pruning(conn, args.lifecycle)
            conn.execute("DROP TABLE flat, parted")
            a = primary_keys(conn, args.rows, args.inserts)
    print_results(a, b)
    print(f"machine: {idle_share(2.0):.0%} idle after the run")


if __name__ == "__main__":
    main()

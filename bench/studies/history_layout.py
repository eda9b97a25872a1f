"""How to keep the messages table flat as history grows: the alternatives, measured side by side
on copies of the real table (same columns and indexes) in a throwaway database.

    .venv/bin/python -m bench.studies.history_layout [--rows 10000000] [--lifecycle 500000]

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
C. Autovacuum: two copies of the table holding --churn-rows rows each, one with PostgreSQL's
   defaults and one with the settings of migration 0015, take the same churn (--churn messages
   inserted, published, delivered, and the oldest rows deleted in prune-sized batches); their
   dead rows and size are sampled as it runs.
"""

from __future__ import annotations

import argparse
import importlib
import random
import time
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import psycopg

from bench.measure import idle_share
from harness.database import throwaway_database
from harness.platform import django_env, manage

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


COUNTED = ("wal_bytes", "wal_fpi", "dirtied", "read")


def measured(conn, sql: str, params=()) -> dict:
    """Run a statement under EXPLAIN (ANALYZE, WAL, BUFFERS): its own WAL bytes, full-page images
    and shared buffers dirtied and read, whatever else the server is doing (the cluster's WAL
    position would count every other database's writes too), and its time."""
    plan = conn.execute(f"EXPLAIN (ANALYZE, WAL, BUFFERS, FORMAT JSON) {sql}", params).fetchone()[0][0]
    top = plan["Plan"]
    return {"seconds": plan["Execution Time"] / 1000, "wal_bytes": top.get("WAL Bytes", 0),
            "wal_fpi": top.get("WAL FPI", 0), "dirtied": top.get("Shared Dirtied Blocks", 0),
            "read": top.get("Shared Read Blocks", 0)}


def add(total: dict, part: dict) -> None:
    for key, value in part.items():
        total[key] = total.get(key, 0) + value


def per_row(total: dict, rows: int) -> dict:
    return {"rows_per_s": rows / total["seconds"], **{key: total[key] / rows for key in COUNTED}}


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


INSERT_SQL = f"""INSERT INTO TABLE ({', '.join(COLUMNS)})
    SELECT id, 1, 3, 'native', format('{PAYLOAD.replace("%s", "%%s")}', id)::jsonb, now() + interval '1 hour', 3600000, 'pending', '', '',
           now(), NULL, NULL, '', NULL, %s::timestamptz, NULL, 0, 0, NULL, ''
    FROM unnest(%s::uuid[]) AS id"""


def insert_rows(conn, table: str, ids: list, finished_at=None) -> dict:
    """A bulk request's rows in one statement, as the platform writes them (it uses COPY, which
    EXPLAIN cannot measure; the index and heap work is the same). ``finished_at``: the
    partitioned table's in-flight sentinel, 'infinity'."""
    return measured(conn, INSERT_SQL.replace("INTO TABLE", f"INTO {table}", 1), [finished_at, ids])


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
        totals = {"v4": {}, "v7": {}}
        for _ in range(inserts // BATCH):
            for kind, table in tables.items():
                ids = [uuid.uuid4() if kind == "v4" else uuid7() for _ in range(BATCH)]
                with conn.transaction():
                    add(totals[kind], insert_rows(conn, table, ids))
        result[label] = {kind: per_row(totals[kind], inserts) for kind in tables}
        step(f"A {label}: " + ", ".join(f"{k} {v['rows_per_s']:,.0f} rows/s, {v['wal_bytes']:,.0f} WAL B/row, "
                                        f"{v['dirtied']:.2f} buffers dirtied/row" for k, v in result[label].items()))
        if label == "empty":  # history is older than what comes next: it must not sit to the right of it
            for table in tables.values():
                conn.execute(f"TRUNCATE {table}")
    for kind, table in tables.items():
        size, density = conn.execute(f"SELECT pg_relation_size('{table}_pkey'), avg_leaf_density "
                                     f"FROM pgstatindex('{table}_pkey')").fetchone()
        result[f"pkey_{kind}"] = {"bytes": size, "leaf_density": density}
    for table in tables.values():
        conn.execute(f"DROP TABLE {table}")
    return result


# --- C: autovacuum ---------------------------------------------------------------------------

TUNED = ", ".join(f"{name} = {value}" for name, value in
                  importlib.import_module("scheduling.migrations.0015_autovacuum_for_churn").SETTINGS.items())


@contextmanager
def autovacuum_for_the_run(conn, allowed: bool):
    """Part C needs the server's autovacuum. Where it is off (this machine's CI image sets
    ``autovacuum = off``), turn it on for the run only with --turn-autovacuum-on (ALTER SYSTEM:
    a superuser's, server-wide) and put it back after; else skip part C."""
    if conn.execute("SELECT current_setting('autovacuum')").fetchone()[0] == "on":
        yield True
        return
    if not allowed:
        step("C: skipped: the server's autovacuum is off (--turn-autovacuum-on turns it on for this run)")
        yield False
        return
    conn.execute("ALTER SYSTEM SET autovacuum = on")
    conn.execute("SELECT pg_reload_conf()")
    step("C: autovacuum turned on for this run (ALTER SYSTEM; reset afterwards)")
    try:
        yield True
    finally:
        conn.execute("ALTER SYSTEM RESET autovacuum")
        conn.execute("SELECT pg_reload_conf()")
        step("C: autovacuum setting reset")


def churn(conn, rows: int, messages: int) -> dict:
    tables = {"default": "churn_default", "tuned": "churn_tuned"}
    for kind, table in tables.items():
        conn.execute(f"CREATE TABLE {table} (LIKE {TABLE} INCLUDING ALL)")
        if kind == "tuned":
            conn.execute(f"ALTER TABLE {table} SET ({TUNED})")
        step(f"C: filling {table} with {rows:,} rows")
        fill(conn, table, rows, "uuid7_at({ts})")
    samples = {kind: [] for kind in tables}

    def sample(done: int) -> None:
        for kind, table in tables.items():
            dead, vacuums, size = conn.execute(
                "SELECT n_dead_tup, autovacuum_count, pg_total_relation_size(relid) FROM pg_stat_user_tables "
                "WHERE relname = %s", [table]).fetchone()
            samples[kind].append({"messages": done, "dead": dead, "vacuums": vacuums, "bytes": size})

    sample(0)
    step(f"C: {messages:,} messages through both tables (insert, publish, deliver; oldest 100,000 deleted "
         "per 100,000 new)")
    for i in range(0, messages, BATCH):
        ids = [uuid7() for _ in range(BATCH)]
        for table in tables.values():
            with conn.transaction():
                insert_rows(conn, table, ids)
            for change in ("status = 'published', published_at = now()",
                           "status = 'delivered', delivered_at = now(), finished_at = now()"):
                with conn.transaction():
                    conn.execute(f"UPDATE {table} SET {change} WHERE id = ANY(%s)", [ids])
            if (i + BATCH) % 100_000 == 0:
                with conn.transaction():
                    conn.execute(f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} "
                                 "ORDER BY created_at LIMIT 100000)")
        if (i + BATCH) % 50_000 == 0:
            sample(i + BATCH)
            last = {k: v[-1] for k, v in samples.items()}
            step("  " + ", ".join(f"{k}: {v['dead']:,} dead, {v['bytes'] / 1e6:,.0f} MB, {v['vacuums']} autovacuums"
                                  for k, v in last.items()))
    for table in tables.values():
        conn.execute(f"DROP TABLE {table}")
    return samples


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


def lifecycle(conn, table: str, ids: list, *, live_finished_at=None, live_where: str = "") -> dict:
    """insert -> published -> delivered, a bulk request's worth at a time, as the platform does.
    ``live_where`` names the in-flight rows' partition, as a partitioned platform's relay and
    delivery loop would (they know the rows they touch are in flight)."""
    out = {}

    def measure(name, statement):
        total = {}
        for i in range(0, len(ids), BATCH):
            with conn.transaction():
                add(total, statement(ids[i:i + BATCH]))
        out[name] = per_row(total, len(ids))

    measure("insert", lambda batch: insert_rows(conn, table, batch, live_finished_at))
    measure("publish", lambda batch: measured(conn, f"UPDATE {table} SET status = 'published', published_at = now(), "
                                              f"routing_key = 'orders' WHERE id = ANY(%s){live_where}", [batch]))
    measure("deliver", lambda batch: measured(conn, f"UPDATE {table} SET status = 'delivered', delivered_at = now(), "
                                              "finished_at = now(), lateness_ms = 4, delivery_count = 1 "
                                              f"WHERE id = ANY(%s){live_where}", [batch]))
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
    parted = lifecycle(conn, "parted", ids, live_finished_at="infinity", live_where=" AND finished_at = 'infinity'")

    step("B: lookups of 500 ids (a delivery batch; an API read knows only the id)")
    sample = random.sample(ids, 500)
    lookups = {}
    for name, sql, params in (
            ("flat", "SELECT id FROM flat WHERE id = ANY(%s)", [sample]),
            ("parted", "SELECT id FROM parted WHERE id = ANY(%s)", [sample]),
            ("parted, partition named", "SELECT id FROM parted WHERE id = ANY(%s) AND finished_at >= %s",
             [sample, now - timedelta(hours=1)])):
        started = time.perf_counter()
        for _ in range(50):
            conn.execute(sql, params).fetchall()
        lookups[name] = (time.perf_counter() - started) / 50 * 1000

    step("B: pruning the day: batched DELETE then VACUUM, against DROP of the day's partition")
    total = {}
    for i in range(0, len(ids), 100_000):
        with conn.transaction():
            add(total, measured(conn, "DELETE FROM flat WHERE id = ANY(%s)", [ids[i:i + 100_000]]))
    flat["prune"] = per_row(total, messages)
    started = time.perf_counter()
    conn.execute("VACUUM flat")
    flat["vacuum"] = {"seconds": time.perf_counter() - started}
    started = time.perf_counter()
    conn.execute(f"DROP TABLE parted_{now.date():%Y%m%d}")
    parted["prune"] = {"rows_per_s": messages / (time.perf_counter() - started), **dict.fromkeys(COUNTED, 0)}
    try:
        conn.execute("CREATE UNIQUE INDEX ON parted (endpoint_id, idempotency_key) WHERE idempotency_key IS NOT NULL")
        unique = "allowed"
    except psycopg.Error as exc:
        unique = str(exc).splitlines()[0]
    return {"flat": flat, "parted": parted, "lookup_ms": lookups, "unique_idempotency_key": unique,
            "messages": messages}


def print_results(a: dict | None, b: dict | None) -> None:
    if a:
        print_keys(a)
    if b:
        print_pruning(b)


def print_keys(a: dict) -> None:
    print("\nA. primary key: inserting bulk requests (1,000 rows), the two tables written alternately; per row:")
    print("table holds      | v4 rows/s | v7 rows/s | v4 WAL B | v7 WAL B | v4 full pages | v7 full pages | "
          "v4 dirtied | v7 dirtied | v4 read | v7 read")
    for label, r in a.items():
        if label.startswith("pkey"):
            continue
        v4, v7 = r["v4"], r["v7"]
        print(f"{label:<16} | {v4['rows_per_s']:>9,.0f} | {v7['rows_per_s']:>9,.0f} | {v4['wal_bytes']:>8,.0f} | "
              f"{v7['wal_bytes']:>8,.0f} | {v4['wal_fpi']:>13.2f} | {v7['wal_fpi']:>13.2f} | {v4['dirtied']:>10.2f} | "
              f"{v7['dirtied']:>10.2f} | {v4['read']:>7.2f} | {v7['read']:>7.2f}")
    for kind in ("v4", "v7"):
        key = a[f"pkey_{kind}"]
        print(f"primary key index {kind}: {key['bytes'] / 1e6:,.0f} MB, leaf pages {key['leaf_density']:.0f} % full")


def print_pruning(b: dict) -> None:
    print("\nB. pruning: per message, one table (DELETE + VACUUM) against partitions by finished day (DROP)")
    print("step     | flat µs | flat WAL B | flat dirtied | partitioned µs | partitioned WAL B | partitioned dirtied")
    for name in ("insert", "publish", "deliver", "prune"):
        f, p = b["flat"][name], b["parted"][name]
        print(f"{name:<8} | {1e6 / f['rows_per_s']:>7.1f} | {f['wal_bytes']:>10,.0f} | {f['dirtied']:>12.2f} | "
              f"{1e6 / p['rows_per_s']:>14.1f} | {p['wal_bytes']:>17,.0f} | {p['dirtied']:>19.2f}")
    print(f"vacuum after the DELETE: {b['flat']['vacuum']['seconds']:.1f} s for {b['messages']:,} rows "
          "(autovacuum's work; none after a DROP)")
    print(f"500 rows by id: flat {b['lookup_ms']['flat']:.1f} ms; partitioned (39 partitions), id only "
          f"{b['lookup_ms']['parted']:.1f} ms, its partition named {b['lookup_ms']['parted, partition named']:.1f} ms")
    print(f"unique idempotency key per endpoint on the partitioned table: {b['unique_idempotency_key']}")


def print_churn(c: dict) -> None:
    print("\nC. autovacuum under churn: the same rows and writes, PostgreSQL's defaults against migration 0015's")
    print("settings   | peak dead rows | size at start | peak size | size at end | autovacuums")
    for kind, samples in c.items():
        print(f"{kind:<10} | {max(s['dead'] for s in samples):>14,} | {samples[0]['bytes'] / 1e6:>10,.0f} MB | "
              f"{max(s['bytes'] for s in samples) / 1e6:>6,.0f} MB | {samples[-1]['bytes'] / 1e6:>8,.0f} MB | "
              f"{samples[-1]['vacuums'] - samples[0]['vacuums']:>11}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows already in the table for part A")
    parser.add_argument("--inserts", type=int, default=100_000, help="rows inserted per measurement in part A")
    parser.add_argument("--lifecycle", type=int, default=500_000, help="messages through each layout in part B")
    parser.add_argument("--churn-rows", type=int, default=5_000_000, help="rows in each table of part C")
    parser.add_argument("--churn", type=int, default=1_000_000, help="messages through each table in part C")
    parser.add_argument("--parts", default="A,B,C", help="which parts to run")
    parser.add_argument("--turn-autovacuum-on", action="store_true",
                        help="part C: where the server's autovacuum is off, turn it on for the run (ALTER SYSTEM)")
    args = parser.parse_args()
    parts = set(args.parts.upper().split(","))
    print(f"machine: {idle_share(2.0):.0%} idle before the run", flush=True)
    run_id = uuid.uuid4().hex[:8]
    with throwaway_database(run_id) as url:
        manage(django_env(run_id, url), "migrate", "--noinput")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
            conn.execute(UUID7_SQL)
            b = pruning(conn, args.lifecycle) if "B" in parts else None
            if b:
                conn.execute("DROP TABLE flat, parted")
            a = primary_keys(conn, args.rows, args.inserts) if "A" in parts else None
            c = None
            if "C" in parts:
                with autovacuum_for_the_run(conn, args.turn_autovacuum_on) as on:
                    c = churn(conn, args.churn_rows, args.churn) if on else None
    print_results(a, b)
    if c:
        print_churn(c)
    print(f"machine: {idle_share(2.0):.0%} idle after the run")


if __name__ == "__main__":
    main()

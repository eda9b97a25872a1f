"""The ordering turn's statements at scale (issue 49): EXPLAIN (ANALYZE, BUFFERS) of the lock, the
earlier-open probe, the wake and the sweep's key scan (scheduling/messages/ordering.py, run as the
platform builds them) on (a) 10,000 keys x 10 open messages on one endpoint and (b) 1 key x 100,000
messages on another; then 100,000 deliveries without a vacuum, and the same EXPLAINs again: whether
the dead index entries a deep key leaves behind its head make the LIMIT 1 ordered probes on
message_ordering (endpoint, key, due, created, id) walk far.

    .venv/bin/python -m bench.explain_ordering [--quick]     # --quick: 1,000 x 10, 1 x 10,000, 10,000 deliveries

A throwaway database (migrated, dropped at the end), no broker: the rows are loaded with one
INSERT ... SELECT per shape (each key's first message published and held, the rest due and
``waiting``, as a burst leaves them). A delivery is what the loop and the relay do to a key, each
step committed on its own, in a procedure of the bench database (a round trip per step would time
Python, not the index): the head delivered, the turn let go, the first open message probed and woken
(``waiting`` -> ``pending``), published by the relay, handed over (the turn held by it). The deep key
takes the deliveries the wide keys' rounds leave (default: one round of the 10,000 keys, then
90,000 of the deep key). Autovacuum is off for both tables, so nothing but the statements' own
index-entry killing and PostgreSQL's page-level cleanup removes what the deliveries leave.

Each statement is explained on 50 candidates (or keys) of the wide keys, and of the deep key, in a
transaction rolled back; "after" is the first run after the deliveries, "again" the same once more
(what the first run left marked dead in the index is skipped by the next). Figures move ~3x between
machines of this kind: compare the rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid

from harness.database import throwaway_database

BATCH = 50  # candidates per explained statement: a delivery batch's keyed share

_LOAD = """
INSERT INTO {messages} (id, endpoint_id, topology_id, payload, due_at, requested_delay_ms, status, routing_key,
    first_exchange, created_at, published_at, delivery_count, attempts, last_error, delivery_mode, delivered_by,
    trigger, ordering_key, waiting_since, payload_bytes)
SELECT gen_random_uuid(), %(endpoint)s, %(topology)s, jsonb_build_object('k', k, 'n', n), due, 60000,
       CASE WHEN n = 1 THEN 'published' ELSE 'waiting' END, '', '', due - interval '1 minute', due - interval '59 seconds',
       0, 0, '', 'native', '', 'scheduled', %(prefix)s::text || k,
       CASE WHEN n > 1 THEN due END, 20
FROM generate_series(1, %(keys)s) AS k CROSS JOIN generate_series(1, %(depth)s) AS n
CROSS JOIN LATERAL (SELECT now() - interval '1 hour' + n * interval '10 ms' + k * interval '1 us' AS due) d
"""
# each key's first message holds its turn (a webhook call out)
_TURNS = """
INSERT INTO {turns} (endpoint_id, key, updated_at, holder_id, holder_until)
SELECT endpoint_id, ordering_key, now(), id, now() + interval '1 hour' FROM {messages}
WHERE endpoint_id = %(endpoint)s AND status = 'published'
"""

# one delivery per key and step, each step its own transaction (what the loop, the relay and the
# next hand-over commit); the probe is _WAKE's (the first open message of the key, in due order)
_PROCEDURE = """
CREATE PROCEDURE bench_deliver(p_e bigint, p_keys text[], p_each int) LANGUAGE plpgsql AS $$
DECLARE k text; head uuid; nxt uuid; head_status text;
BEGIN
  FOREACH k IN ARRAY p_keys LOOP
    FOR i IN 1..p_each LOOP
      SELECT id INTO head FROM {messages} WHERE endpoint_id = p_e AND ordering_key = k AND status IN ({open})
        ORDER BY due_at, created_at, id LIMIT 1;
      EXIT WHEN head IS NULL;
      UPDATE {messages} SET status = 'delivered', delivered_at = now(), finished_at = now(), delivery_count = 1
        WHERE id = head;
      UPDATE {turns} SET updated_at = now(), holder_id = NULL, holder_until = NULL WHERE endpoint_id = p_e AND key = k;
      SELECT id, status INTO nxt, head_status FROM {messages}
        WHERE endpoint_id = p_e AND ordering_key = k AND status IN ({open}) ORDER BY due_at, created_at, id LIMIT 1;
      UPDATE {messages} SET status = 'pending', published_at = NULL WHERE id = nxt AND status = 'waiting';
      COMMIT;
      EXIT WHEN nxt IS NULL;
      UPDATE {messages} SET status = 'published', published_at = now() WHERE id = nxt;
      COMMIT;
      UPDATE {turns} SET updated_at = now(), holder_id = nxt, holder_until = now() + interval '30 seconds'
        WHERE endpoint_id = p_e AND key = k;
      COMMIT;
    END LOOP;
  END LOOP;
END $$
"""


def _setup(keys: int, depth: int) -> dict:
    """Two endpoints of one team, the rows, the turns; returns the ids the statements need."""
    from django.db import connection

    from scheduling.core.lifecycle import ORDER_OPEN_VALUES
    from scheduling.messages.ordering import MESSAGES, TURNS
    from scheduling.models import Endpoint, TopologyVersion
    from scheduling.teams.services import team_create

    version = TopologyVersion.objects.get(name="v3")
    team = team_create(name=f"bench-{uuid.uuid4().hex[:6]}")
    wide, deep = (Endpoint.objects.create(name=name, queue=f"{team.name}--{name}", topology=version,
                                          handler="none", team=team) for name in ("wide", "deep"))
    with connection.cursor() as cursor:
        for table in (MESSAGES, TURNS):
            cursor.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        for endpoint, prefix, n_keys, n_depth in ((wide, "account-", keys, 10), (deep, "firehose-", 1, depth)):
            started = time.perf_counter()
            cursor.execute(_LOAD.format(messages=MESSAGES), {"endpoint": endpoint.id, "topology": version.id,
                                                             "prefix": prefix, "keys": n_keys, "depth": n_depth})
            cursor.execute(_TURNS.format(messages=MESSAGES, turns=TURNS), {"endpoint": endpoint.id})
            print(f"  loaded {endpoint.name}: {n_keys:,} key(s) x {n_depth:,} in {time.perf_counter() - started:.1f} s",
                  flush=True)
        cursor.execute(f"VACUUM ANALYZE {MESSAGES}")
        cursor.execute(f"VACUUM ANALYZE {TURNS}")
        opened = ", ".join(f"'{s}'" for s in sorted(ORDER_OPEN_VALUES))
        cursor.execute(_PROCEDURE.format(messages=MESSAGES, turns=TURNS, open=opened))
    return {"wide": wide.id, "deep": deep.id, "keys": keys}


def _candidates(*, endpoint: int, key: str | None, limit: int):
    """What a hand-over batch holds: the second open message of each of ``limit`` keys (the first
    holds the turn), or the deep key's first ``limit`` open ones after its head."""
    from scheduling.core.lifecycle import Status
    from scheduling.models import ScheduledMessage

    rows = ScheduledMessage.objects.filter(endpoint_id=endpoint, status=Status.WAITING).only(
        "id", "endpoint_id", "ordering_key", "due_at", "created_at", "overlap")
    if key is not None:
        return list(rows.filter(ordering_key=key).order_by("due_at", "created_at", "id")[:limit])
    keys = [f"account-{k}" for k in range(1, limit + 1)]
    firsts = {}
    for m in rows.filter(ordering_key__in=keys).order_by("ordering_key", "due_at", "created_at", "id"):
        firsts.setdefault(m.ordering_key, m)
    return list(firsts.values())


def _statements(ids: dict) -> dict[str, tuple[str, list]]:
    """Name -> (SQL, parameters): each turn statement as ordering.py runs it."""
    from scheduling.messages import ordering
    out = {}
    for label, endpoint, key in (("50 keys", ids["wide"], None), ("deep key", ids["deep"], "firehose-1")):
        rows = _candidates(endpoint=endpoint, key=key, limit=BATCH)
        pairs = sorted({(m.endpoint_id, m.ordering_key) for m in rows})
        out[f"lock, {label}"] = (ordering._LOCK, [[e for e, _ in pairs], [k for _, k in pairs], "{}", "{}"])
        out[f"earlier, {label}"] = (ordering._EARLIER, ordering._earlier_params(rows))
        for m in rows:
            m.overlap = "buffer_one"  # a schedule's runs: the key's waiting probe as well
        out[f"earlier buffer_one, {label}"] = (ordering._EARLIER, ordering._earlier_params(rows))
        out[f"wake, {label}"] = (ordering._WAKE, [[e for e, _ in pairs], [k for _, k in pairs]])
    sweep = (f"(SELECT DISTINCT endpoint_id, ordering_key FROM {ordering.MESSAGES} WHERE status = 'waiting' "
             f"AND waiting_since < statement_timestamp() - make_interval(secs => %s) LIMIT %s) "
             f"UNION (SELECT endpoint_id, key FROM {ordering.TURNS} WHERE holder_id IS NOT NULL "
             f"AND holder_until <= statement_timestamp() LIMIT %s)")
    out["sweep key scan"] = (sweep, [ordering.SWEEP_SECONDS, ordering.SWEEP_KEYS, ordering.SWEEP_KEYS])
    return out


def _nodes(plan: dict) -> list[str]:
    """The plan's node types, depth first, an index scan with its index."""
    name = plan["Node Type"] + (f" {plan['Index Name']}" if "Index Name" in plan else "")
    return [name] + [n for child in plan.get("Plans", ()) for n in _nodes(child)]


def _explain(sql: str, params: list) -> dict:
    """EXPLAIN (ANALYZE, BUFFERS) in a transaction rolled back (the lock and the wake write)."""
    from django.db import connection, transaction

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
            found = cursor.fetchone()[0]
        transaction.set_rollback(True)
    found = (json.loads(found) if isinstance(found, str) else found)[0]
    plan = found["Plan"]
    nodes = _nodes(plan)
    return {"ms": found["Execution Time"], "hit": plan.get("Shared Hit Blocks", 0),
            "read": plan.get("Shared Read Blocks", 0), "rows": plan.get("Actual Rows"),
            "nodes": [n for i, n in enumerate(nodes) if n not in nodes[:i]]}


def _explain_all(statements: dict) -> dict:
    return {name: _explain(sql, params) for name, (sql, params) in statements.items()}


def _deliver(ids: dict, *, wide_rounds: int, deep: int) -> list[str]:
    """The deliveries, with progress; returns lines of µs per delivery by chunk."""
    from django.db import connection

    lines = []
    keys = [f"account-{k}" for k in range(1, ids["keys"] + 1)]
    chunks = [(ids["wide"], keys[i:i + 1000], wide_rounds) for i in range(0, len(keys), 1000) if wide_rounds]
    step = max(1000, deep // 10)
    chunks += [(ids["deep"], ["firehose-1"], min(step, deep - i)) for i in range(0, deep, step)]
    done = 0
    started = time.perf_counter()
    connection.ensure_connection()
    raw = connection.connection  # CALL with COMMITs inside needs autocommit, outside any transaction
    raw.autocommit = True
    for endpoint, chunk, each in chunks:
        t0 = time.perf_counter()
        raw.execute("CALL bench_deliver(%s, %s, %s)", (endpoint, chunk, each))
        n = len(chunk) * each
        done += n
        what = "wide" if endpoint == ids["wide"] else "deep"
        line = f"  delivered {done:,} ({what}: {n:,} in {time.perf_counter() - t0:.1f} s, " \
               f"{(time.perf_counter() - t0) * 1e6 / n:,.0f} µs each)"
        print(line, flush=True)
        lines.append(line)
    print(f"  {done:,} deliveries in {time.perf_counter() - started:.1f} s", flush=True)
    return lines


def _table(before: dict, after: dict, again: dict) -> None:
    width = max(map(len, before))
    print(f"\n{'statement'.ljust(width)}  {'before ms':>9} {'bufs':>6}  {'after ms':>9} {'bufs':>6}  "
          f"{'again ms':>9} {'bufs':>6}  nodes (after)")
    for name in before:
        cells = "  ".join(f"{f[name]['ms']:9.2f} {f[name]['hit'] + f[name]['read']:6,}" for f in (before, after, again))
        print(f"{name.ljust(width)}  {cells}  {' > '.join(after[name]['nodes'])}")
    changed = [name for name in before if before[name]["nodes"] != after[name]["nodes"]]
    for name in changed:
        print(f"  plan changed, {name}: before {' > '.join(before[name]['nodes'])}")


def _sizes() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, pg_relation_size(oid) / 8192 FROM pg_class "
                       "WHERE relname IN ('message_ordering', 'message_waiting', 'ordering_turn_key') ORDER BY 1")
        return ", ".join(f"{name} {pages:,} pages" for name, pages in cursor.fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 keys x 10, 1 key x 10,000, 10,000 deliveries")
    parser.add_argument("--keys", type=int, default=None, help="wide keys (10 open messages each); 10,000")
    parser.add_argument("--depth", type=int, default=None, help="the deep key's messages; 100,000")
    parser.add_argument("--deliveries", type=int, default=None, help="100,000: the wide rounds', the rest the deep key's")
    parser.add_argument("--wide-rounds", type=int, default=1, help="deliveries per wide key (1)")
    args = parser.parse_args()
    keys = args.keys or (1000 if args.quick else 10_000)
    depth = args.depth or (10_000 if args.quick else 100_000)
    deliveries = args.deliveries or (10_000 if args.quick else 100_000)
    deep = min(depth - 1, max(0, deliveries - keys * args.wide_rounds))
    with throwaway_database(f"ordering_{uuid.uuid4().hex[:8]}") as url:
        os.environ["DATABASE_URL"] = url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "delayplatform.settings_test")
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        print(f"loading {keys:,} keys x 10 and 1 key x {depth:,} ...", flush=True)
        ids = _setup(keys, depth)
        print(f"  indexes: {_sizes()}")
        before = _explain_all(_statements(ids))
        print(f"delivering {keys * args.wide_rounds:,} (wide, {args.wide_rounds} a key) + {deep:,} (deep key), "
              f"no vacuum ...", flush=True)
        _deliver(ids, wide_rounds=args.wide_rounds, deep=deep)
        print(f"  indexes: {_sizes()}")
        statements = _statements(ids)  # the candidates moved on: the same shapes, today's rows
        after = _explain_all(statements)
        again = _explain_all(statements)
        from django.db import connections

        connections.close_all()
    print(f"\nbatch of {BATCH}; ms = execution time, bufs = shared buffers hit + read (8 KiB pages)")
    _table(before, after, again)


if __name__ == "__main__":
    main()

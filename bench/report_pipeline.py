"""The nightly accuracy report at scale (issue 6): N synthetic delivery rows in PostgreSQL, then
``manage.py accuracy_report`` (export + Spark job + load) over them; prints each stage's time.

    .venv/bin/python -m bench.report_pipeline [--rows 10000000] [--days 7]

The rows go into a throwaway database that is dropped at the end. Generating them is not part of
the pipeline and is timed apart (secondary indexes are built after the insert, foreign-key
triggers are skipped: both only speed up the set-up). The figures depend on what else the two
cores are doing; the machine's idle share before the run is printed to judge that."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path

import psycopg

from bench.measure import idle_share
from harness.database import throwaway_database
from harness.paths import ARTIFACTS, ROOT
from harness.platform import django_env, manage

ENDPOINTS = 20
TABLE = "scheduling_scheduledmessage"
ENDPOINTS_SQL = """
    WITH team AS (
        INSERT INTO scheduling_team (name, created_at, api_rate, key_api_rate, celery_task_allowlist,
                                     webhook_allowed_networks)
        VALUES ('default', now(), '', '', '*', '') ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id)
    INSERT INTO scheduling_endpoint (team_id, name, queue, topology_id, handler, handler_target, webhook_secret,
                                     webhook_secret_previous, delivery_mode, is_active, created_at, updated_at)
    SELECT (SELECT id FROM team), 'bench-' || lpad(i::text, 2, '0'), 'bench-' || lpad(i::text, 2, '0'),
           (SELECT id FROM scheduling_topologyversion
            WHERE name = CASE WHEN i %% 2 = 0 THEN 'v2' ELSE 'v1' END),
           'none', '', '', '', 'native', true, now(), now()
    FROM generate_series(0, %(endpoints)s - 1) i
"""
# Delays log-uniform from 1 ms to 2 days; 1% cancelled, 0.1% failed, 0.01% lost (published, never
# arrived); lateness 2-12 ms with a 1% tail to 0.5 s, 0.01% early; 0.1% handed over twice.
MESSAGES_SQL = f"""
    INSERT INTO {TABLE} (id, endpoint_id, topology_id, payload, due_at, requested_delay_ms, status,
        routing_key, first_exchange, created_at, published_at, delivered_at, cancelled_at, lateness_ms,
        delivery_count, attempts, idempotency_key, last_error)
    SELECT gen_random_uuid(), e.id, e.topology_id, '{{}}'::jsonb, s.due, s.delay_ms, s.status, '', '',
           s.due - s.delay_ms * interval '1 ms',
           CASE WHEN s.status <> 'pending' THEN s.due - s.delay_ms * interval '1 ms' END,
           CASE WHEN s.status = 'delivered' THEN s.due + s.lateness * interval '1 ms' END,
           CASE WHEN s.status = 'cancelled' THEN s.due - interval '1 s' END,
           CASE WHEN s.status = 'delivered' THEN s.lateness END,
           CASE WHEN s.status = 'delivered' THEN s.copies WHEN s.status = 'cancelled' THEN 1 ELSE 0 END,
           0, NULL, ''
    FROM (
        SELECT i,
               %(start)s::timestamptz + (i::float8 * %(days)s * 86400000 / %(rows)s) * interval '1 ms' AS due,
               floor(exp(random() * ln(2 * 86400000.0)))::bigint AS delay_ms,
               CASE WHEN u < 0.01 THEN 'cancelled' WHEN u < 0.011 THEN 'failed'
                    WHEN u < 0.0111 THEN 'published'
                    ELSE 'delivered' END AS status,
               CASE WHEN random() < 0.0001 THEN -5
                    ELSE floor(2 + random() * 10
                               + CASE WHEN random() < 0.01 THEN random() * 500 ELSE 0 END)::bigint
               END AS lateness,
               CASE WHEN random() < 0.001 THEN 2 ELSE 1 END AS copies
        FROM (SELECT i, random() AS u FROM generate_series(%(first)s, %(last)s) i) g
    ) s
    JOIN scheduling_endpoint e ON e.name = 'bench-' || lpad((s.i %% {ENDPOINTS})::text, 2, '0')
"""
STAGE_LINE = re.compile(r"^\s+(export|spark|load|total)\s+([\d.]+) s$", re.M)


def generate(database_url: str, rows: int, days: int, first_day: date, writers: int = 2) -> float:
    """Insert the rows with `writers` connections at once, indexes dropped meanwhile."""
    started = time.perf_counter()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(ENDPOINTS_SQL, {"endpoints": ENDPOINTS})
        indexes = conn.execute(
            "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index "
            "WHERE indrelid = %s::regclass AND NOT indisprimary",
            (TABLE,),
        ).fetchall()
        for name, _ in indexes:
            conn.execute(f"DROP INDEX {name}")
        conn.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_pkey")

    def insert(part: int) -> None:
        first, last = part * rows // writers, (part + 1) * rows // writers - 1
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")  # skip the FK triggers: rows are valid
            conn.execute(
                MESSAGES_SQL,
                {
                    "start": first_day.isoformat() + " 00:00:00+00",
                    "days": days,
                    "rows": rows,
                    "first": first,
                    "last": last,
                },
            )

    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(insert, range(writers)))
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute(f"ALTER TABLE {TABLE} ADD PRIMARY KEY (id)")
        for _, definition in indexes:
            conn.execute(definition)
        conn.execute(f"ANALYZE {TABLE}")
    return time.perf_counter() - started


def peak_rss_mib(pid: int, stop: threading.Event, peak: list[int]) -> None:
    """Sample the command's resident memory (not its Spark child's) until told to stop."""
    while not stop.wait(0.2):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        kib = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
        peak[0] = max(peak[0], kib // 1024)


def run_pipeline(env: dict, first_day: date, last_day: date) -> dict:
    command = [
        sys.executable,
        "manage.py",
        "accuracy_report",
        "--since",
        first_day.isoformat(),
        "--until",
        last_day.isoformat(),
        "--no-progress",
    ]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stop, peak = threading.Event(), [0]
    sampler = threading.Thread(target=peak_rss_mib, args=(process.pid, stop, peak), daemon=True)
    sampler.start()
    out, err = process.communicate()
    stop.set()
    wall = time.perf_counter() - started
    if process.returncode:
        raise SystemExit(f"accuracy_report failed: {err.strip().splitlines()[-1] if err.strip() else out}")
    stages = {name: float(seconds) for name, seconds in STAGE_LINE.findall(out)}
    return {**stages, "command_wall": round(wall, 1), "django_process_peak_rss_mib": peak[0], "output": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=7)
    args = parser.parse_args()
    run_id = uuid.uuid4().hex[:8]
    last_day = date.today() - timedelta(days=1)
    first_day = last_day - timedelta(days=args.days - 1)
    idle = idle_share()
    with (
        throwaway_database(run_id) as database_url,
        tempfile.TemporaryDirectory(prefix="dp-bench-report-") as work,
    ):
        env = django_env(run_id, database_url, ACCURACY_REPORT_DIR=work)
        manage(env, "migrate", "--noinput")
        print(
            f"generating {args.rows:,} delivery rows over {args.days} days ({first_day}..{last_day}) ...",
            flush=True,
        )
        generated = generate(database_url, args.rows, args.days, first_day)
        print(f"  generated in {generated:.1f} s (set-up, not part of the pipeline)", flush=True)
        idle_before_pipeline = idle_share()
        result = run_pipeline(env, first_day, last_day)
        with psycopg.connect(database_url) as conn:
            counted = conn.execute(
                "SELECT sum(scheduled), sum(lost), sum(duplicates), sum(early) "
                "FROM scheduling_accuracyreport "
                "WHERE endpoint = '*' AND version = '*' AND delivery_mode = '*' AND delay_bucket = '*'"
            ).fetchone()
    print(result.pop("output").rstrip())
    print(f"machine idle share: {idle:.0%} before set-up, {idle_before_pipeline:.0%} before the pipeline")
    print(
        f"export {result['export']:.1f} s | spark {result['spark']:.1f} s | load {result['load']:.1f} s | "
        f"total {result['total']:.1f} s (command wall incl. Django start {result['command_wall']:.1f} s)"
    )
    print(f"Django process peak RSS (export + load): {result['django_process_peak_rss_mib']} MiB")
    print(
        f"report check: scheduled {counted[0]:,} (expected {args.rows:,}), lost {counted[1]:,}, "
        f"duplicates {counted[2]:,}, early {counted[3]:,}"
    )
    if counted[0] != args.rows:
        raise SystemExit("the report does not count every generated row")
    summary = {
        "rows": args.rows,
        "days": args.days,
        "generate_seconds": round(generated, 1),
        "idle_share_before": round(idle, 2),
        "idle_share_before_pipeline": round(idle_before_pipeline, 2),
        **result,
    }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / "bench-report-pipeline.json"
    out.write_text(json.dumps(summary, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

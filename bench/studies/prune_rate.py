"""How fast the prune archives and deletes, and what the archive costs on disk per message.

    .venv/bin/python -m bench.studies.prune_rate [--rows 2000000] [--retention 3d]

A throwaway database gets --rows finished messages over the last 7 days (bench/history/fill.py);
``manage.py prune_messages`` then archives and deletes those past --retention, with payloads and
(in a second database) without. It prints messages per second, archive bytes per message, and
the table's size before, after, and after VACUUM: the prune must outrun the traffic (at
1,000 messages/s an hourly prune has 3.6 M to move), and the archive's size per message sizes
its disk.
"""

from __future__ import annotations

import argparse
import re
import time
import uuid

import psycopg

from bench.history.fill import history_fill
from bench.measure import idle_share
from harness.database import throwaway_database
from harness.paths import ARTIFACTS
from harness.platform import django_env, manage

TABLE = "scheduling_scheduledmessage"


def table_bytes(url: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(f"SELECT pg_total_relation_size('{TABLE}'), count(*) FROM {TABLE}").fetchone()


def one_run(rows: int, retention: str, payloads: bool) -> dict:
    run_id = uuid.uuid4().hex[:8]
    archive = ARTIFACTS / f"prune-rate-{run_id}"
    with throwaway_database(run_id) as url:
        env = django_env(run_id, url, DELAY_RETENTION=retention, DELAY_FAILED_RETENTION=retention,
                         DELAY_ARCHIVE_DIR=str(archive), DELAY_ARCHIVE_PAYLOADS="on" if payloads else "off")
        manage(env, "migrate", "--noinput")
        history_fill(database_url=url, rows=rows, progress=lambda line: print(f"  {line}", flush=True))
        before, count_before = table_bytes(url)
        started = time.perf_counter()
        out = manage(env, "prune_messages", "--no-progress")
        seconds = time.perf_counter() - started
        print(f"manage.py prune_messages (payloads {'on' if payloads else 'off'}):\n{out}", flush=True)
        after, count_after = table_bytes(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"VACUUM {TABLE}")
        vacuumed, _ = table_bytes(url)
        archived = int(re.search(r"archived\s+([\d,]+) messages", out)[1].replace(",", ""))
        archive_bytes = sum(p.stat().st_size for p in archive.rglob("*.parquet"))
        files = len(list(archive.rglob("*.parquet")))
    for path in sorted(archive.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    archive.rmdir()
    return {"payloads": payloads, "rows": count_before, "archived": archived, "left": count_after,
            "seconds": seconds, "per_s": archived / seconds, "archive_bytes_per_msg": archive_bytes / archived,
            "files": files, "table_before": before, "table_after": after, "table_vacuumed": vacuumed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--retention", default="3d", help="DELAY_RETENTION for the run (the fill spans 7 days)")
    args = parser.parse_args()
    print(f"machine: {idle_share(2.0):.0%} idle before the run", flush=True)
    results = [one_run(args.rows, args.retention, payloads) for payloads in (True, False)]
    print("\npayloads | rows in table | archived | seconds | archived/s (with the command's start) | "
          "archive B/msg | files | table before -> after -> after VACUUM")
    for r in results:
        print(f"{'on' if r['payloads'] else 'off':<8} | {r['rows']:>13,} | {r['archived']:>8,} | {r['seconds']:>7.1f} | "
              f"{r['per_s']:>38,.0f} | {r['archive_bytes_per_msg']:>13.1f} | {r['files']:>5} | "
              f"{r['table_before'] / 1e6:,.0f} MB -> {r['table_after'] / 1e6:,.0f} MB -> "
              f"{r['table_vacuumed'] / 1e6:,.0f} MB")
    print(f"machine: {idle_share(2.0):.0%} idle after the run")


if __name__ == "__main__":
    main()

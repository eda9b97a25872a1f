"""``manage.py migrate`` under a lock timeout: a migration that needs the messages table while a
long transaction holds it gives up with one line, so the queries behind it are held up for the
timeout at most; without the timeout (Django's own migrate) they wait as long as that transaction.

The migration is the real 0023 (ADD COLUMN on scheduling_scheduledmessage: ACCESS EXCLUSIVE for a
moment), applied to a database of the test's own migrated to 0022."""

import os
import subprocess
import sys
import time
import uuid

import psycopg
import pytest

from harness.database import throwaway_database
from harness.paths import ROOT
from harness.waiting import wait_until
from scheduling.config.conf import setting_name

TABLE = "scheduling_scheduledmessage"
MIGRATION = "0023_captured_task"


def migrate(url: str, target: str, timeout_ms: int, wait: bool = True):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "delayplatform.settings_test", "DATABASE_URL": url,
           setting_name("migration_lock_timeout_ms"): str(timeout_ms)}
    args = [sys.executable, "manage.py", "migrate", "scheduling", target, "-v0", "--skip-checks"]
    if wait:
        return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def waiting_for_a_lock(conn, pid: int) -> bool:
    """Whether backend ``pid`` waits for a lock on the messages table."""
    return conn.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted AND relation = %s::regclass",
                        (pid, TABLE)).fetchone()[0] > 0


def applied(conn) -> bool:
    return conn.execute("SELECT count(*) FROM django_migrations WHERE app = 'scheduling' AND name = %s",
                        (MIGRATION,)).fetchone()[0] == 1


@pytest.fixture(scope="module")
def database():
    with throwaway_database(f"locks_{uuid.uuid4().hex[:8]}") as url:
        done = migrate(url, "0022_webhook_engine", 0)
        assert done.returncode == 0, done.stderr[-3000:]
        yield url


def test_a_migration_behind_a_long_transaction_gives_up_with_one_line_and_holds_nothing_up(database):
    with psycopg.connect(database) as holder, psycopg.connect(database, autocommit=True) as other:
        holder.execute(f"SELECT count(*) FROM {TABLE}")  # a long transaction: ACCESS SHARE until it ends
        started = time.monotonic()
        done = migrate(database, MIGRATION, 1000)
        assert holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # still holding
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 1 and len(lines) == 1, done.stderr
        assert lines[0].startswith(f"CommandError: migration scheduling.{MIGRATION} waited 1000 ms for a lock")
        assert setting_name("migration_lock_timeout_ms") in lines[0]
        # nothing applied, and the table answers at once although the transaction still holds it
        other.execute("SET statement_timeout = '5s'")
        assert not applied(other)
        assert other.execute(f"SELECT count(*) FROM {TABLE}").fetchone() == (0,)
        print(f"\nmigrate gave up after {time.monotonic() - started:.1f} s (Django started, 1 s of lock wait)")
        holder.rollback()
    assert migrate(database, MIGRATION, 1000).returncode == 0  # the transaction ended: migrate again
    with psycopg.connect(database) as conn:
        assert applied(conn)
    assert migrate(database, "0022_webhook_engine", 1000).returncode == 0  # as it was, for the next test


def test_without_the_timeout_every_query_queues_behind_the_waiting_migration(database):
    """What the timeout prevents: Django's migrate waits for the lock, and a plain read of the
    table, which the long transaction itself does not block, now waits behind the migration."""
    with psycopg.connect(database) as holder, psycopg.connect(database, autocommit=True) as other:
        holder.execute(f"SELECT count(*) FROM {TABLE}")
        process = migrate(database, MIGRATION, 0, wait=False)
        try:
            pid = wait_until(lambda: other.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE %s",
                (f"%ALTER TABLE%{TABLE}%",)).fetchone(), 60, 0.1, "migrate to wait for its lock")[0]
            assert waiting_for_a_lock(other, pid)
            other.execute("SET statement_timeout = '1s'")
            with pytest.raises(psycopg.errors.QueryCanceled):
                other.execute(f"SELECT count(*) FROM {TABLE}")  # held up behind the migration
            assert process.poll() is None
        finally:
            holder.rollback()
        assert process.wait(60) == 0, process.stderr.read()[-3000:]
    with psycopg.connect(database) as conn:
        assert applied(conn)
    assert migrate(database, "0022_webhook_engine", 1000).returncode == 0

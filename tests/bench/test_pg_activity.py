"""bench/pg_activity.py: PostgreSQL's counters over a window, per message, read from the real server
(rows, HOT updates, transactions, WAL) and, from two snapshots, the statements' calls."""

import pytest
from django.db import connection

from bench.pg_activity import PgActivity, PgWindow, Snapshot
from harness.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def sql(query, *params):
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def scratch():
    """A table of its own: an indexed column and a column no index names (its updates may be HOT)."""
    sql("CREATE TABLE bench_scratch (id int PRIMARY KEY, indexed int, free int) WITH (fillfactor = 50)")
    sql("CREATE INDEX bench_scratch_indexed ON bench_scratch (indexed)")
    yield "bench_scratch"
    sql("DROP TABLE bench_scratch")


def test_a_window_counts_rows_hot_updates_transactions_and_wal_per_message(scratch):
    activity = PgActivity(sql).start()
    for n in range(20):
        sql("INSERT INTO bench_scratch VALUES (%s, %s, 0)", n, n)
    sql("UPDATE bench_scratch SET free = 1")  # no index names it: HOT
    sql("UPDATE bench_scratch SET indexed = indexed + 100 WHERE id < 5")  # a new index entry each: not HOT

    def flushed():  # a backend reports its counts at most once a second, when idle
        window = activity.stop().per(20)
        return window if window.rows.get(scratch, {}).get("updated") == 25 / 20 else None

    window = wait_until(flushed, 15, 0.2, "the backend's statistics flushed")
    assert window.rows[scratch] == {"inserted": 1.0, "updated": 25 / 20, "hot": 1.0, "deleted": 0.0}
    assert window.transactions >= 22 / 20  # each statement its own transaction (autocommit)
    assert window.wal_bytes > 0 and window.wal_records > 0
    assert (window.statements is None) is not activity.statements_on
    assert "bench_scratch ins 1.00 upd 1.25 (HOT 1.00)" in window.line()


def test_statements_are_counted_per_message_busiest_first():
    def snapshot(calls):
        return Snapshot(xact_commit=0, wal=(0, 0, 0), tables={},
                        statements={qid: (c, f"SELECT  {qid}\n") for qid, c in calls.items()})

    window = PgWindow(snapshot({1: 10, 2: 5}), snapshot({1: 30, 2: 5, 3: 40})).per(10)
    assert window.statements == (20 + 0 + 40) / 10
    assert window.top == [(4.0, "SELECT 3"), (2.0, "SELECT 1")]  # a statement not called in the window is left out
    assert "6.00 statements" in window.line()

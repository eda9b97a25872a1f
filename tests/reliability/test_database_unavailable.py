"""The database goes away while deliveries are due: the worker connects as its own role, which
the test locks out (NOLOGIN, sessions terminated) for a while. Delivery tasks cannot record
anything, so they are retried, not dropped; once the database is back every message is
delivered once, never early."""

import time
import uuid

import psycopg
import pytest

from harness.platform import platform

from .conftest import size
from .faults import count_status, endpoint, outcome, schedule, settle, wait_published

pytestmark = [pytest.mark.broker, pytest.mark.e2e]


def admin_sql(database_url: str, *statements: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def test_database_unavailable_at_delivery(report, rng):
    role = f"dpw_{uuid.uuid4().hex[:8]}"
    with platform(web_workers=2, settings="delayplatform.settings_test") as p:
        database = p.env["DATABASE_URL"].rsplit("/", 1)[1]
        admin_sql(p.env["DATABASE_URL"], f"CREATE ROLE {role} LOGIN PASSWORD 'pw'",
                  f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}",
                  f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
        try:
            worker_url = f"postgres://{role}:pw@127.0.0.1:5432/{database}"
            worker = p.start_worker(concurrency=2, DATABASE_URL=worker_url)
            name = endpoint(p, "no-db")
            n = size(500, 200)
            schedule(p, name, [round(rng.uniform(3, 15), 3) for _ in range(n)])
            wait_published(p, name, n, timeout=30)
            time.sleep(2)
            admin_sql(p.env["DATABASE_URL"], f"ALTER ROLE {role} NOLOGIN",
                      f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
            time.sleep(10)  # deliveries fall due with no database
            stalled = count_status(p, name, "published")
            admin_sql(p.env["DATABASE_URL"], f"ALTER ROLE {role} LOGIN")
            settle(p, name, n, timeout=90)
            counts = report(outcome(p, name, "database unavailable at delivery (10 s)",
                                    note=f"{stalled} due while the database was away"))
            retried = worker.log_text().count("postponed: database unavailable")
        finally:
            for running in p.workers:  # a role with sessions cannot be dropped
                running.stop()
            admin_sql(p.env["DATABASE_URL"], f"DROP OWNED BY {role}", f"DROP ROLE IF EXISTS {role}")
    assert stalled > 0, "nothing fell due during the outage"
    assert retried > 0, "no delivery was retried"
    assert counts.lost == 0 and counts.early == 0

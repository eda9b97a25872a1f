"""PostgreSQL for tests and benchmarks: the URL of a Django database's settings (for processes
started beside the test run), and a throwaway database of a run's own."""

from __future__ import annotations

import os
from contextlib import contextmanager

import psycopg

PG = os.environ.get("BENCH_PG", "postgres://postgres:postgres@127.0.0.1:5432")


def database_url(settings_dict: dict) -> str:
    user, password = settings_dict.get("USER") or "postgres", settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{password}" if password else user
    host, port = settings_dict.get("HOST") or "127.0.0.1", settings_dict.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{settings_dict['NAME']}"


@contextmanager
def throwaway_database(run_id: str):
    """A PostgreSQL database of this run's own, migrated; dropped on exit. Yields its URL."""
    db = f"dp_bench_{run_id}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    try:
        yield f"{PG}/{db}"
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

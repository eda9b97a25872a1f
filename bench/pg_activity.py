"""What PostgreSQL did over a bench window, per message: statements (from pg_stat_statements, when
the server preloads it: ``scripts/services.sh postgres-statements``, which ``make bench`` runs),
transactions committed, WAL records, full-page images and bytes (pg_stat_wal: the whole server), and
per table the rows inserted, updated (and how many of those were HOT: no index entry written) and
deleted. Issue 52 measures first with it: where a message's database cost goes, and whether a change
lowers it.

    activity = PgActivity(platform.sql).start()
    ...                                   # the load
    figures = activity.stop().per(delivered)   # per message; ``figures.top`` the busiest statements
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Snapshot:
    xact_commit: int
    wal: tuple[int, int, int]  # records, full-page images, bytes
    tables: dict[str, tuple[int, int, int, int]]  # inserted, updated, HOT-updated, deleted
    statements: dict[int, tuple[int, str]] | None  # queryid -> (calls, text); None without the extension


@dataclass
class Activity:
    """Per message over the window (``messages`` of them): what the caller prints."""

    messages: float
    transactions: float
    wal_records: float
    wal_fpi: float
    wal_bytes: float
    statements: float | None
    rows: dict[str, dict[str, float]] = field(default_factory=dict)  # table -> inserted/updated/hot/deleted
    top: list[tuple[float, str]] = field(default_factory=list)  # (calls a message, statement), busiest first

    def line(self) -> str:
        statements = "n/a (pg_stat_statements not preloaded)" if self.statements is None else f"{self.statements:.2f}"
        written = ", ".join(f"{table.removeprefix('scheduling_')} ins {r['inserted']:.2f} upd {r['updated']:.2f} "
                            f"(HOT {r['hot']:.2f}) del {r['deleted']:.2f}" for table, r in sorted(self.rows.items()))
        return (f"PostgreSQL a message: {statements} statements, {self.transactions:.2f} transactions, "
                f"WAL {self.wal_bytes:,.0f} B in {self.wal_records:.1f} records ({self.wal_fpi:.2f} full pages); "
                f"rows: {written}")


class PgActivity:
    """Snapshots of PostgreSQL's counters through ``sql`` (harness.platform.Platform.sql: the bench's
    database), taken at start() and stop()."""

    def __init__(self, sql: Callable[..., list]):
        self.sql = sql
        self.statements_on = bool(sql("SELECT count(*) FROM pg_settings WHERE name = 'shared_preload_libraries' "
                                      "AND setting LIKE '%%pg_stat_statements%%'")[0][0])
        if self.statements_on:
            sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.first: Snapshot | None = None

    def start(self) -> PgActivity:
        self.first = self._snapshot()
        return self

    def stop(self) -> PgWindow:
        """The window's end: its figures, divided by its messages once they are counted (``per``)."""
        assert self.first is not None, "start() first"
        return PgWindow(self.first, self._snapshot())

    def _snapshot(self) -> Snapshot:
        # the cumulative statistics are flushed by each backend at most once a second: a window of
        # several seconds reads them to within that
        self.sql("SELECT pg_stat_clear_snapshot()")
        xact = self.sql("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")[0][0]
        wal = tuple(int(v) for v in self.sql("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal")[0])
        tables = {name: (ins, upd, hot, dele) for name, ins, upd, hot, dele in self.sql(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables")}
        statements = None
        if self.statements_on:
            statements = {qid: (calls, text) for qid, calls, text in self.sql(
                "SELECT queryid, calls, query FROM pg_stat_statements "
                "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND queryid IS NOT NULL")}
        return Snapshot(xact_commit=xact, wal=wal, tables=tables, statements=statements)  # type: ignore[arg-type]


@dataclass
class PgWindow:
    first: Snapshot
    last: Snapshot

    def per(self, messages: float, top: int = 8) -> Activity:
        """The window's counts per message, and its ``top`` busiest statements."""
        first, last, n = self.first, self.last, max(1.0, messages)
        rows: dict[str, dict[str, float]] = {}
        for table in {*first.tables, *last.tables}:
            before, after = first.tables.get(table, (0, 0, 0, 0)), last.tables.get(table, (0, 0, 0, 0))
            changed = dict(zip(("inserted", "updated", "hot", "deleted"),
                               ((a - b) / n for b, a in zip(before, after, strict=True)), strict=True))
            if any(changed.values()):
                rows[table] = changed
        statements, busiest = None, []
        if first.statements is not None and last.statements is not None:
            calls = {qid: c - first.statements.get(qid, (0, ""))[0] for qid, (c, _) in last.statements.items()}
            statements = sum(calls.values()) / n
            busiest = sorted(((c / n, " ".join(last.statements[qid][1].split())[:140]) for qid, c in calls.items() if c),
                             reverse=True)[:top]
        return Activity(messages=messages, transactions=(last.xact_commit - first.xact_commit) / n,
                        wal_records=(last.wal[0] - first.wal[0]) / n, wal_fpi=(last.wal[1] - first.wal[1]) / n,
                        wal_bytes=(last.wal[2] - first.wal[2]) / n, statements=statements, rows=rows, top=busiest)

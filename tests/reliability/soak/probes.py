"""What the soak measures about the running platform, read from where each figure lives: /proc for
a process tree's memory and file descriptors, the private node's management API for broker
connections and channels, PostgreSQL's own views for its connections and the table's size, the
file system for the archive."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import requests


def process_tree(root: int) -> list[int]:
    """``root`` and every process descending from it (a worker's pool and beat, gunicorn's workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                # the command may contain spaces and parentheses: the fields after the last ")"
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def tree_rss_bytes(root: int) -> int:
    """The sum of every process's resident set (pages shared after fork count once per process,
    as top and ps show them)."""
    return sum(rss_bytes(pid) for pid in process_tree(root))


def tree_fds(root: int) -> int:
    return sum(fd_count(pid) for pid in process_tree(root))


def broker_totals(management_url: str) -> tuple[int, int]:
    """(connections, channels) on the node, from the management API's overview (refreshed by the
    broker every few seconds)."""
    from urllib.parse import urlsplit

    parts = urlsplit(management_url)
    response = requests.get(f"{parts.scheme}://{parts.hostname}:{parts.port}/api/overview",
                            auth=(parts.username or "guest", parts.password or "guest"), timeout=10)
    response.raise_for_status()
    totals = response.json().get("object_totals", {})
    return int(totals.get("connections", 0)), int(totals.get("channels", 0))


TABLE = "scheduling_scheduledmessage"


@dataclass(frozen=True)
class Vacuums:
    manual: int  # VACUUM passes completed (the soak's own)
    auto: int  # autovacuum passes completed
    auto_age_s: float | None  # seconds since the last autovacuum pass ended (None: none yet)


class DatabaseFigures:
    """PostgreSQL's figures for the soak's database, on one connection kept for the run (its own
    backend is left out of the connection count)."""

    def __init__(self, url: str):
        self.conn = psycopg.connect(url, autocommit=True)

    def connections(self) -> int:
        return self.conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND pid <> pg_backend_pid()").fetchone()[0]

    def relation_bytes(self) -> tuple[int, int, dict[str, int]]:
        """(the table without its indexes: heap, TOAST and the free-space and visibility maps; its
        indexes together; each index by name): judged apart, as vacuum frees their space differently."""
        heap, indexes = self.conn.execute(f"SELECT pg_table_size('{TABLE}'), pg_indexes_size('{TABLE}')").fetchone()
        each = self.conn.execute("SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
                                 f"WHERE indrelid = '{TABLE}'::regclass ORDER BY 1").fetchall()
        return heap, indexes, dict(each)

    def vacuums(self) -> Vacuums:
        """The table's vacuum passes so far, from PostgreSQL's statistics (a pass counts once it completes)."""
        row = self.conn.execute(
            "SELECT vacuum_count, autovacuum_count, extract(epoch FROM now() - last_autovacuum) "
            f"FROM pg_stat_user_tables WHERE relid = '{TABLE}'::regclass").fetchone()
        return Vacuums(row[0], row[1], None if row[2] is None else float(row[2]))

    def vacuum(self) -> float:
        """VACUUM the table (an operator's maintenance; an autovacuum pass holding the table yields
        to it within a second); the seconds it took."""
        started = time.monotonic()
        self.conn.execute("SET statement_timeout = '10min'")
        self.conn.execute(f"VACUUM {TABLE}")
        self.conn.execute("RESET statement_timeout")
        return time.monotonic() - started

    def rows(self) -> tuple[int, int]:
        """Live rows (counted) and dead row versions (PostgreSQL's statistics): a table that grows
        with as many live rows is held by more messages, one that grows with dead ones by VACUUM
        not keeping up."""
        (live,) = self.conn.execute("SELECT count(*) FROM scheduling_scheduledmessage").fetchone()
        (dead,) = self.conn.execute("SELECT coalesce(max(n_dead_tup), 0) FROM pg_stat_user_tables "
                                    "WHERE relname = 'scheduling_scheduledmessage'").fetchone()
        return live, dead

    def outbox(self) -> int:
        """Rows saved but not yet published (the outbox the sweeper works off)."""
        return self.conn.execute("SELECT count(*) FROM scheduling_scheduledmessage WHERE status = 'pending'").fetchone()[0]

    def unsettled(self) -> int:
        return self.conn.execute("SELECT count(*) FROM scheduling_scheduledmessage "
                                 "WHERE status IN ('pending', 'published')").fetchone()[0]

    def close(self) -> None:
        self.conn.close()


def disk_bytes(path: Path) -> int:
    """Bytes the directory's files occupy on disk (allocated blocks, as du counts them)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total

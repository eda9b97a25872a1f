"""Stream the live ScheduledMessage rows of the report's days to Parquet, one partition per due
date (UTC): ``OUT/due_date=YYYY-MM-DD/part-0.parquet``, the layout Spark reads as a partitioned
table, in the archive's columns (scheduling/archive/): the report reads these and the archive's
files of the same days alike. A message scheduled in the past is due when it was accepted
(reports/facts.py).

Memory stays flat however many rows a day has (retention/parquet.py streams COPY through pyarrow).
A day is written beside its partition and then swapped in, so re-running a day replaces it whole,
and an empty day leaves an empty file.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from django.db import transaction

from scheduling.reports.facts import message_list_due_between
from scheduling.retention import columns, parquet

# Batches are gathered into row groups this big: Spark read a day of 6k-row groups 30% slower.
ROW_GROUP_ROWS = 256 * 1024


class ExportError(Exception):
    """A problem the user can fix (a directory that cannot be written); one line, no traceback."""


@dataclass
class ExportResult:
    out_dir: Path
    rows_by_day: dict[date, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(self.rows_by_day.values())


def utc_day_bounds(first_day: date, last_day: date) -> tuple[datetime, datetime]:
    """[first_day 00:00, the day after last_day 00:00) in UTC."""
    return (
        datetime.combine(first_day, time(), timezone.utc),
        datetime.combine(last_day + timedelta(days=1), time(), timezone.utc),
    )


def days_between(first_day: date, last_day: date) -> list[date]:
    return [first_day + timedelta(days=i) for i in range((last_day - first_day).days + 1)]


def partition_dir(out_dir: Path, day: date) -> Path:
    return out_dir / columns.partition_name(day)


def writable_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-").close()
    except OSError as exc:
        raise ExportError(f"cannot write to {path}: {exc.strerror or exc}") from None
    return path.resolve()


def deliveries_export(
    *, first_day: date, last_day: date, out_dir: Path, progress: bool = False, team_id: int | None = None
) -> ExportResult:
    """``team_id``: that team's messages only (None: the whole platform's, as the report needs)."""
    if last_day < first_day:
        raise ExportError(f"the last day {last_day} is before the first day {first_day}")
    out_dir = writable_dir(Path(out_dir))
    result = ExportResult(out_dir)
    with _progress_bar(progress, first_day, last_day, team_id) as advance:
        for day in days_between(first_day, last_day):
            result.rows_by_day[day] = _export_day(day, out_dir, advance, team_id)
    return result


def _export_day(day: date, out_dir: Path, advance: Callable[[int], None], team_id: int | None) -> int:
    staging = out_dir / f".staging-{day.isoformat()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    rows, pending = 0, []
    try:
        with pq.ParquetWriter(staging / "part-0.parquet", columns.SCHEMA, compression=parquet.COMPRESSION) as writer:
            for batch in fact_batches(*utc_day_bounds(day, day), team_id=team_id):
                pending.append(batch)
                rows += batch.num_rows
                advance(batch.num_rows)
                if sum(b.num_rows for b in pending) >= ROW_GROUP_ROWS:
                    writer.write_table(pa.Table.from_batches(pending), row_group_size=ROW_GROUP_ROWS)
                    pending = []
            if pending:
                writer.write_table(pa.Table.from_batches(pending), row_group_size=ROW_GROUP_ROWS)
        _swap_in(staging, partition_dir(out_dir, day))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return rows


def _swap_in(staging: Path, target: Path) -> None:
    """Replace target with staging; readers see the old or the new day, never a mix."""
    retired = target.with_name(f".retired-{target.name}-{uuid.uuid4().hex[:8]}")
    if target.exists():
        target.rename(retired)
    staging.rename(target)
    shutil.rmtree(retired, ignore_errors=True)


def fact_batches(since: datetime, until: datetime, *, team_id: int | None = None):
    """The live rows due in [since, until) (of one team, or of all), in the archive's columns (no
    payloads, no attempts: the report reads neither)."""
    where, params = parquet.where_of(message_list_due_between(since=since, until=until, team_id=team_id))
    # wrap_database_errors (in message_batches): psycopg errors of the COPY become Django's
    with transaction.atomic():
        for batch in parquet.message_batches(where=where, params=params, payloads=False, attempts=False):
            yield parquet.without_day(batch)


@contextmanager
def _progress_bar(enabled: bool, first_day: date, last_day: date, team_id: int | None):
    """Yields advance(rows). The total is counted first, which is cheap next to the export."""
    if not enabled:
        yield lambda rows: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    since, until = utc_day_bounds(first_day, last_day)
    total = message_list_due_between(since=since, until=until, team_id=team_id).count()
    parts = (
        TextColumn("exporting deliveries"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rows"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*parts, console=Console(stderr=True)) as bar:
        task = bar.add_task("export", total=total)
        yield lambda rows: bar.advance(task, rows)

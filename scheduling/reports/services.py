"""The delay-accuracy report: export the facts, run the Spark job, load its rows into
AccuracyReport. Each day's rows are replaced whole, so re-running a day is harmless."""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from time import perf_counter

import pyarrow.dataset as pa_dataset
from django.db import connection, transaction
from django.utils import timezone

from scheduling.config.conf import conf
from scheduling.models import AccuracyReport
from scheduling.reports.export import deliveries_export
from scheduling.reports.facts import archive_file_list
from scheduling.reports.spark_job import job_run


@dataclass(frozen=True)
class AccuracyRun:
    first_day: date
    last_day: date
    facts: int  # live rows exported
    archived: int  # rows read from the archive's files of those days
    report_rows: int
    export_seconds: float
    spark_seconds: float
    load_seconds: float

    @property
    def seconds(self) -> float:
        return self.export_seconds + self.spark_seconds + self.load_seconds


SPARK_LOGS_KEPT = 30  # the job's logs of the latest runs (one a night): older ones are removed


def accuracy_report_run(
    *, first_day: date, last_day: date | None = None, progress: bool = False
) -> AccuracyRun:
    """Raises ExportError or SparkJobFailed (one-line messages) when a stage cannot run. The
    live rows of the days and the list of their archived files are taken in one snapshot: a
    prune commits its delete and its file's listing together, so each message is counted once,
    and the report of a day is the same before and after its messages are pruned."""
    last_day = last_day or first_day
    as_of = timezone.now()
    settings = conf()
    work = settings.accuracy_report_dir
    run_id = f"{as_of:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    run_dir = work / "runs" / run_id  # scratch: the live facts, the archive listing, Spark's output
    started = perf_counter()
    try:
        own_transaction = not connection.in_atomic_block  # (a test's transaction wraps everything)
        with transaction.atomic():
            if own_transaction:
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            archived = archive_file_list(first_day=first_day, last_day=last_day)
            exported = deliveries_export(
                first_day=first_day, last_day=last_day, out_dir=run_dir / "facts", progress=progress
            )
        listing = run_dir / "archive-files.txt"
        listing.write_text("".join(f"{f.path}\n" for f in archived))
        exported_at = perf_counter()
        results = run_dir / "results"
        job_run(
            facts_dir=exported.out_dir,
            archive_dir=settings.archive_dir,
            archive_files=listing,
            out_dir=results,
            first_day=first_day,
            last_day=last_day,
            as_of=as_of,
            lost_after=timedelta(seconds=settings.accuracy_lost_after_seconds),
            log_path=work / "logs" / f"spark-{run_id}.log",
        )
        spark_done_at = perf_counter()
        loaded = accuracy_report_load(
            results_dir=results, first_day=first_day, last_day=last_day, computed_at=as_of
        )
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        _remove_old_logs(work / "logs")
    return AccuracyRun(
        first_day,
        last_day,
        exported.rows,
        sum(f.rows for f in archived),
        loaded,
        exported_at - started,
        spark_done_at - exported_at,
        perf_counter() - spark_done_at,
    )


def _remove_old_logs(logs: Path) -> None:
    if logs.is_dir():
        for old in sorted(logs.glob("spark-*.log"), key=lambda p: p.stat().st_mtime)[:-SPARK_LOGS_KEPT]:
            old.unlink(missing_ok=True)


def accuracy_report_load(*, results_dir: Path, first_day: date, last_day: date, computed_at: datetime) -> int:
    """Replace the report rows of [first_day, last_day] with the Spark job's output (every
    team's, and the platform-wide ones: the job always reports the whole platform)."""
    table = pa_dataset.dataset(results_dir, format="parquet").to_table()
    rows = [AccuracyReport(**row, computed_at=computed_at) for row in table.to_pylist()]
    stray = sorted({row.day for row in rows if not first_day <= row.day <= last_day})
    if stray:
        raise ValueError(f"the Spark job returned rows for days outside {first_day}..{last_day}: {stray}")
    with transaction.atomic():
        AccuracyReport.objects.filter(day__range=(first_day, last_day)).delete()
        AccuracyReport.objects.bulk_create(rows, batch_size=1000)
    return len(rows)

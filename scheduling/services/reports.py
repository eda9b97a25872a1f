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
from django.db import transaction
from django.utils import timezone

from ..conf import conf
from ..models import AccuracyReport
from ..reports.export import deliveries_export
from ..reports.spark_job import job_run


@dataclass(frozen=True)
class AccuracyRun:
    first_day: date
    last_day: date
    facts: int
    report_rows: int
    export_seconds: float
    spark_seconds: float
    load_seconds: float

    @property
    def seconds(self) -> float:
        return self.export_seconds + self.spark_seconds + self.load_seconds


def accuracy_report_run(
    *, first_day: date, last_day: date | None = None, progress: bool = False
) -> AccuracyRun:
    """Raises ExportError or SparkJobFailed (one-line messages) when a stage cannot run."""
    last_day = last_day or first_day
    as_of = timezone.now()
    work = conf().accuracy_report_dir
    run_id = f"{as_of:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    started = perf_counter()
    exported = deliveries_export(
        first_day=first_day, last_day=last_day, out_dir=work / "facts", progress=progress
    )
    exported_at = perf_counter()
    results = work / "results" / run_id
    try:
        job_run(
            facts_dir=exported.out_dir,
            out_dir=results,
            first_day=first_day,
            last_day=last_day,
            as_of=as_of,
            lost_after=timedelta(seconds=conf().accuracy_lost_after_seconds),
            log_path=work / "logs" / f"spark-{run_id}.log",
        )
        spark_done_at = perf_counter()
        loaded = accuracy_report_load(
            results_dir=results, first_day=first_day, last_day=last_day, computed_at=as_of
        )
    finally:
        shutil.rmtree(results, ignore_errors=True)
    return AccuracyRun(
        first_day,
        last_day,
        exported.rows,
        loaded,
        exported_at - started,
        spark_done_at - exported_at,
        perf_counter() - spark_done_at,
    )


def accuracy_report_load(*, results_dir: Path, first_day: date, last_day: date, computed_at: datetime) -> int:
    """Replace the report rows of [first_day, last_day] with the Spark job's output."""
    table = pa_dataset.dataset(results_dir, format="parquet").to_table()
    rows = [AccuracyReport(**row, computed_at=computed_at) for row in table.to_pylist()]
    stray = sorted({row.day for row in rows if not first_day <= row.day <= last_day})
    if stray:
        raise ValueError(f"the Spark job returned rows for days outside {first_day}..{last_day}: {stray}")
    with transaction.atomic():
        AccuracyReport.objects.filter(day__range=(first_day, last_day)).delete()
        AccuracyReport.objects.bulk_create(rows, batch_size=1000)
    return len(rows)

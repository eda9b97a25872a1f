"""Launch accuracy.py as its own process: a JVM started in a web or Celery process would stay
there, and the same command line works on a cluster (SPARK_MASTER or ACCURACY_SPARK_SUBMIT)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from datetime import date, datetime, timedelta
from pathlib import Path

from scheduling.config.conf import conf

JOB_FILE = Path(__file__).resolve().with_name("accuracy.py")  # not imported: workers need no pyspark loaded


class SparkJobFailed(Exception):
    """The job exited non-zero; the message is one line naming the cause and the log."""


def job_command(
    *, facts_dir: Path, out_dir: Path, first_day: date, last_day: date, as_of: datetime, lost_after: timedelta,
    archive_dir: Path | None = None, archive_files: Path | None = None,
) -> list[str]:
    """``archive_files``: a listing of the archive files to read with the live facts (relative to
    ``archive_dir``)."""
    launcher = shlex.split(conf().accuracy_spark_submit) or [sys.executable]
    archive = ["--archive", str(archive_dir), "--archive-files", str(archive_files)] if archive_dir else []
    return [
        *launcher,
        str(JOB_FILE),
        *archive,
        "--facts",
        str(facts_dir),
        "--out",
        str(out_dir),
        "--since",
        first_day.isoformat(),
        "--until",
        last_day.isoformat(),
        "--as-of",
        as_of.isoformat(),
        "--lost-after-seconds",
        str(lost_after.total_seconds()),
    ]


def job_run(*, log_path: Path, **arguments) -> None:
    env = {**os.environ, "SPARK_MASTER": conf().spark_master}
    env.setdefault("PYSPARK_PYTHON", sys.executable)  # executors of local[*] need pyspark too
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        try:
            finished = subprocess.run(
                job_command(**arguments),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            raise SparkJobFailed(f"cannot start the Spark job: {exc}") from None
    if finished.returncode:
        raise SparkJobFailed(
            f"the Spark job failed (exit {finished.returncode}): {last_error(log_path)}; see {log_path}"
        )


def last_error(log_path: Path) -> str:
    """The line that says what went wrong: the last exception line, else the last line."""
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line.split(":")[0] or "Exception" in line.split(":")[0]]
    return (errors or lines or ["no output"])[-1][:500]

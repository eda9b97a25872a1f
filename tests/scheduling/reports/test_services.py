"""Loading the Spark job's rows into AccuracyReport, and the accuracy_report command's errors."""

from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command

from scheduling.models import AccuracyReport
from scheduling.reports.accuracy import ALL, DELAY_BUCKETS, REPORT_COLUMNS
from scheduling.reports.services import accuracy_report_load
from tests.scheduling.reports.conftest import report_values

pytestmark = pytest.mark.django_db
DAY1, DAY2 = date(2026, 11, 19), date(2026, 11, 20)
COMPUTED_AT = datetime(2026, 11, 21, 2, 30, tzinfo=UTC)


def write_rows(directory, *rows: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    columns = {name: [row[name] for row in rows] for name in REPORT_COLUMNS}
    pq.write_table(
        pa.table(columns) if rows else pa.table({n: pa.array([], pa.string()) for n in REPORT_COLUMNS}),
        directory / "part-00000.parquet",
    )


def report_row(day: date, endpoint: str = ALL, **fields) -> dict:
    return report_values(day=day, endpoint=endpoint, **fields)


def test_the_model_knows_the_jobs_bucket_labels_and_rollup_marker():
    assert AccuracyReport.DELAY_BUCKETS == tuple(label for label, _ in DELAY_BUCKETS)
    assert AccuracyReport.ALL == ALL


def test_loading_replaces_the_days_rows_and_keeps_other_days(tmp_path):
    write_rows(
        tmp_path / "first", report_row(DAY1), report_row(DAY2, scheduled=5), report_row(DAY2, "billing")
    )
    assert (
        accuracy_report_load(
            results_dir=tmp_path / "first", first_day=DAY1, last_day=DAY2, computed_at=COMPUTED_AT
        )
        == 3
    )

    write_rows(tmp_path / "second", report_row(DAY2, scheduled=7, lost=2, lateness_p50_ms=None))
    assert (
        accuracy_report_load(
            results_dir=tmp_path / "second", first_day=DAY2, last_day=DAY2, computed_at=COMPUTED_AT
        )
        == 1
    )

    rows = {(r.day, r.endpoint): r for r in AccuracyReport.objects.all()}
    assert set(rows) == {(DAY1, ALL), (DAY2, ALL)}
    assert (rows[DAY2, ALL].scheduled, rows[DAY2, ALL].lost, rows[DAY2, ALL].lateness_p50_ms) == (7, 2, None)
    assert rows[DAY2, ALL].problems == 2 and rows[DAY2, ALL].computed_at == COMPUTED_AT


def test_each_row_is_loaded_with_its_team(tmp_path):
    """Two teams' billing and the platform-wide row of the day: three rows, each naming its team."""
    write_rows(tmp_path / "rows", report_row(DAY1, "billing", team="a"), report_row(DAY1, "billing", team="b", lost=1),
               report_row(DAY1))
    assert accuracy_report_load(results_dir=tmp_path / "rows", first_day=DAY1, last_day=DAY1,
                                computed_at=COMPUTED_AT) == 3
    assert sorted(AccuracyReport.objects.values_list("team", "endpoint", "lost")) == [
        (ALL, ALL, 0), ("a", "billing", 0), ("b", "billing", 1)]


def test_an_empty_result_clears_the_day(tmp_path):
    write_rows(tmp_path / "first", report_row(DAY1))
    accuracy_report_load(
        results_dir=tmp_path / "first", first_day=DAY1, last_day=DAY1, computed_at=COMPUTED_AT
    )
    (tmp_path / "empty").mkdir()
    assert (
        accuracy_report_load(
            results_dir=tmp_path / "empty", first_day=DAY1, last_day=DAY1, computed_at=COMPUTED_AT
        )
        == 0
    )
    assert not AccuracyReport.objects.exists()


def test_rows_for_days_outside_the_range_are_refused_and_nothing_changes(tmp_path):
    write_rows(tmp_path / "first", report_row(DAY1))
    accuracy_report_load(
        results_dir=tmp_path / "first", first_day=DAY1, last_day=DAY1, computed_at=COMPUTED_AT
    )
    write_rows(tmp_path / "stray", report_row(DAY2))
    with pytest.raises(ValueError, match="outside 2026-11-19..2026-11-19"):
        accuracy_report_load(
            results_dir=tmp_path / "stray", first_day=DAY1, last_day=DAY1, computed_at=COMPUTED_AT
        )
    assert AccuracyReport.objects.get().day == DAY1


@pytest.mark.parametrize(
    "launcher, error",
    [
        ("false", r"^the Spark job failed \(exit 1\): no output; see .*spark-.*\.log$"),
        ("no-such-spark-submit --master yarn", r"^cannot start the Spark job: .*No such file or directory"),
    ],
)
def test_a_failing_spark_job_is_a_one_line_error(launcher, error, settings, tmp_path, versions):
    settings.ACCURACY_REPORT_DIR = tmp_path
    settings.ACCURACY_SPARK_SUBMIT = launcher
    with pytest.raises(CommandError, match=error):
        call_command("accuracy_report", "--date", "2026-11-20", "--no-progress")
    assert not list(tmp_path.glob("results/*"))  # no scratch output left behind


@pytest.mark.parametrize(
    "args, error",
    [
        (["--date", "2026-02-30"], "--date: not a date (YYYY-MM-DD): '2026-02-30'"),
        (["--until", "2026-11-20"], "--until needs --since"),
        (
            ["--since", "2026-11-20", "--until", "2026-11-01"],
            "--until 2026-11-01 is before --since 2026-11-20",
        ),
    ],
)
def test_accuracy_report_refuses_bad_dates(args, error):
    with pytest.raises(CommandError) as raised:
        call_command("accuracy_report", *args)
    assert str(raised.value) == error


def test_beat_runs_yesterdays_report_at_the_configured_time(monkeypatch, settings):
    from celery.schedules import crontab

    from delayplatform.celery import app
    from scheduling.celery import tasks

    entry = settings.CELERY_BEAT_SCHEDULE["accuracy-report-nightly"]
    assert entry["schedule"] == crontab(hour=2, minute=30) and entry["task"] in app.tasks
    calls = []
    monkeypatch.setattr(tasks, "accuracy_report_run", lambda **kwargs: calls.append(kwargs) or _Run())
    assert app.tasks[entry["task"]].run() == 7
    assert calls == [{"first_day": datetime.now(UTC).date() - timedelta(days=1)}]


class _Run:
    report_rows = 7

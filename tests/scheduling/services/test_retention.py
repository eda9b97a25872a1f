"""The prune: exactly the finished messages past their retention are archived (every column, one
row each, partitioned by the report's day) and deleted; in-flight and young failed ones stay;
files of killed runs are removed; a second prune does nothing while one runs. Crash safety with
real SIGKILLs is in tests/reliability/test_prune_killed.py."""

import json
import uuid
from datetime import UTC, date, datetime, timedelta

import psycopg
import pyarrow.dataset as ds
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from scheduling.archive import columns
from scheduling.models import AccuracyReport, ArchiveFile, ScheduledMessage
from scheduling.reports.accuracy import COUNTS
from scheduling.services.retention import PRUNE_LOCK, PruneError, message_prune
from tests.scheduling.reports.conftest import spark  # noqa: F401 (the session's Spark)
from harness.database import database_url

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def archive_rows(archive) -> dict[str, dict]:
    """Every row of the archive directory read as any Parquet reader would (hidden files
    skipped, the day from the directory), by id; an id twice fails."""
    if not archive.exists():
        return {}
    table = ds.dataset(archive, format="parquet", partitioning="hive").to_table()
    rows = table.to_pylist()
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids)), "a message archived twice"
    return {row["id"]: row for row in rows}


@pytest.fixture
def archive(settings, tmp_path):
    settings.ACCURACY_REPORT_DIR = tmp_path
    settings.DELAY_RETENTION = timedelta(days=7)
    settings.DELAY_FAILED_RETENTION = timedelta(days=30)
    return tmp_path / "archive"


@pytest.fixture
def row(endpoint_row):
    def make(status, *, created_days, finished_days=None, due_days=None, **fields):
        created = NOW - timedelta(days=created_days)
        due = NOW - timedelta(days=due_days) if due_days is not None else created + timedelta(seconds=30)
        values = {"status": status, "created_at": created, "due_at": due, "requested_delay_ms": 30_000,
                  "payload": {"order": uuid.uuid4().hex}, **fields}
        if finished_days is not None:
            values["finished_at"] = NOW - timedelta(days=finished_days)
        return ScheduledMessage.objects.create(endpoint=endpoint_row, topology=endpoint_row.topology, **values)

    return make


@pytest.fixture
def history(row):
    """(rows that must go, rows that must stay), as the rules say."""
    go = [
        row("delivered", created_days=9, finished_days=8, delivered_at=NOW - timedelta(days=8), lateness_ms=4,
            delivery_count=1, delivered_by="w1@host", routing_key="rk", first_exchange="dp.v2.delay-level-04",
            published_at=NOW - timedelta(days=9)),
        row("cancelled", created_days=10, finished_days=7.5, cancelled_at=NOW - timedelta(days=7.5)),
        row("failed", created_days=40, finished_days=31, attempts=6, last_error="handler attempt 6: 500",
            idempotency_key="order-1"),
        # from before finished_at was recorded: the latest moment the row has counts
        row("delivered", created_days=12, delivered_at=NOW - timedelta(days=9)),
        row("failed", created_days=50, published_at=NOW - timedelta(days=45), last_error="unroutable: ..."),
        row("delivered", created_days=8, finished_days=7.1, payload={"text": 'quotes " and, commas\nand lines'},
            last_error="NULL"),
    ]
    stay = [
        row("delivered", created_days=6.9, finished_days=6.9),  # finished within the retention
        row("cancelled", created_days=100, finished_days=1, due_days=-2000),  # a long delay cancelled lately
        row("failed", created_days=20, finished_days=10),  # failed: kept 30 days for a republish
        row("pending", created_days=400),  # never pruned, however old
        row("published", created_days=20, due_days=-8 * 365),  # due in eight years
    ]
    return go, stay


def test_prune_archives_then_deletes_exactly_the_finished_messages_past_retention(archive, history, settings):
    go, stay = history
    settings.DELAY_PRUNE_BATCH = 2  # several batches per status: where each starts is exercised

    result = message_prune(now=NOW)

    assert {m.id for m in ScheduledMessage.objects.all()} == {m.id for m in stay}
    archived = archive_rows(archive)
    assert set(archived) == {str(m.id) for m in go}
    assert (result.candidates, result.archived, result.deleted, result.kept_in_flight) == (6, 6, 6, 2)
    assert ArchiveFile.objects.count() == result.files and sum(f.rows for f in ArchiveFile.objects.all()) == 6
    assert all((archive / f.path).stat().st_size == f.bytes for f in ArchiveFile.objects.all())
    assert result.reusable_bytes > 0 and not result.skipped


def test_an_archived_row_has_every_column_as_the_table_had_it(archive, history, endpoint_row):
    go, _ = history
    message_prune(now=NOW)

    archived = archive_rows(archive)
    first, odd = go[0], go[5]
    assert archived[str(first.id)] == {
        "id": str(first.id), "team": endpoint_row.team.name, "endpoint": endpoint_row.name,
        "endpoint_id": endpoint_row.id, "version": "v2",
        "topology_id": endpoint_row.topology_id, "delivery_mode": "native", "requested_delay_ms": 30_000,
        "due_at": first.due_at, "created_at": first.created_at, "published_at": first.published_at,
        "delivered_at": first.delivered_at, "cancelled_at": None, "finished_at": first.finished_at,
        "status": "delivered", "lateness_ms": 4, "delivery_count": 1, "attempts": 0, "delivered_by": "w1@host",
        "routing_key": "rk", "first_exchange": "dp.v2.delay-level-04", "idempotency_key": None, "last_error": "",
        "schedule": None, "due_history": None, "throttled_ms": None, "payload": json.dumps(first.payload), "shard": 0,
        "due_date": max(first.due_at, first.created_at).date().isoformat(),  # from the directory's name
    }
    assert json.loads(archived[str(odd.id)]["payload"]) == odd.payload  # quotes, commas, newlines
    assert archived[str(odd.id)]["last_error"] == "NULL"  # text that reads NULL is not a NULL
    assert archived[str(go[2].id)]["idempotency_key"] == "order-1"


def test_each_day_of_the_report_is_a_directory(archive, row):
    """The day is the accuracy report's: the due date, or the day it was accepted when it was
    scheduled in the past; one file per day per batch."""
    ahead = row("delivered", created_days=20, due_days=19.5, finished_days=19.5)
    backdated = row("delivered", created_days=18, due_days=300, finished_days=18)
    message_prune(now=NOW)

    assert {f.day for f in ArchiveFile.objects.all()} == {ahead.due_at.date(), backdated.created_at.date()}
    for f in ArchiveFile.objects.all():
        assert f.path.startswith(f"due_date={f.day.isoformat()}/part-") and f.path.endswith(".parquet")
    assert archive_rows(archive)[str(backdated.id)]["due_date"] == backdated.created_at.date().isoformat()


def test_payloads_can_be_left_out(archive, row, settings):
    settings.DELAY_ARCHIVE_PAYLOADS = False
    message = row("cancelled", created_days=9, finished_days=9)
    message_prune(now=NOW)
    assert archive_rows(archive)[str(message.id)]["payload"] is None


def test_a_dry_run_counts_and_changes_nothing(archive, history):
    result = message_prune(now=NOW, dry_run=True)
    assert (result.candidates, result.archived, result.deleted, result.kept_in_flight) == (6, 0, 0, 2)
    assert ScheduledMessage.objects.count() == 11 and not archive.exists() and not ArchiveFile.objects.exists()


def test_files_of_a_killed_run_are_removed_before_anything_is_written(archive, row):
    message = row("delivered", created_days=9, finished_days=9)
    listed_day = archive / "due_date=2026-01-01"
    listed_day.mkdir(parents=True)
    (listed_day / "part-listed.parquet").write_bytes(b"kept")
    ArchiveFile.objects.create(path="due_date=2026-01-01/part-listed.parquet", day=date(2026, 1, 1), rows=1, bytes=4)
    (listed_day / "part-unlisted.parquet").write_bytes(b"a killed run's")
    (listed_day / ".part-half.parquet.tmp").write_bytes(b"half")
    (listed_day / "notes.txt").write_text("not the prune's")

    result = message_prune(now=NOW)

    assert result.orphans_removed == 2
    assert sorted(p.name for p in listed_day.iterdir()) == ["notes.txt", "part-listed.parquet"]
    assert result.deleted == 1 and not ScheduledMessage.objects.filter(id=message.id).exists()
    (written,) = ArchiveFile.objects.exclude(path__contains="listed")
    assert (archive / written.path).exists() and written.rows == 1


def test_a_second_prune_does_nothing_while_one_holds_the_lock(archive, row):
    row("delivered", created_days=9, finished_days=9)
    url = database_url(connection.settings_dict)
    with psycopg.connect(url, autocommit=True) as other:  # another session holds the prune lock
        other.execute("SELECT pg_advisory_lock(%s)", [PRUNE_LOCK])
        result = message_prune(now=NOW)
        other.execute("SELECT pg_advisory_unlock(%s)", [PRUNE_LOCK])
    assert result.skipped and result.deleted == 0 and ScheduledMessage.objects.count() == 1
    assert message_prune(now=NOW).deleted == 1  # once it is free


def test_archive_days_past_their_retention_are_deleted(archive, settings):
    settings.DELAY_ARCHIVE_RETENTION = timedelta(days=400)
    days = {"old": (NOW - timedelta(days=401)).date(), "kept": (NOW - timedelta(days=399)).date()}
    for name, day in days.items():
        path = f"due_date={day.isoformat()}/part-{name}.parquet"
        (archive / path).parent.mkdir(parents=True)
        (archive / path).write_bytes(b"x")
        ArchiveFile.objects.create(path=path, day=day, rows=1, bytes=1)

    for day in days.values():
        AccuracyReport.objects.create(day=day, endpoint="*", version="*", delivery_mode="*", delay_bucket="*",
                                      computed_at=NOW, **dict.fromkeys(COUNTS, 0))

    result = message_prune(now=NOW)

    assert result.archive_days_removed == 1 and result.report_rows_removed == 1
    assert [f.day for f in ArchiveFile.objects.all()] == [days["kept"]]
    assert sorted(p.name for p in archive.iterdir()) == [f"due_date={days['kept'].isoformat()}"]
    assert [r.day for r in AccuracyReport.objects.all()] == [days["kept"]]  # its facts are gone with the archive


def test_an_archive_that_cannot_be_written_deletes_nothing(settings, tmp_path, row):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    settings.DELAY_ARCHIVE_DIR = str(blocker / "archive")
    row("delivered", created_days=9, finished_days=9)
    with pytest.raises(CommandError, match=r"^cannot write to the archive .*a-file/archive: Not a directory$"):
        call_command("prune_messages", "--no-progress")
    assert ScheduledMessage.objects.count() == 1 and not ArchiveFile.objects.exists()


def test_the_command_prints_a_summary(archive, history, capsys, settings):
    settings.DELAY_RETENTION = timedelta(days=7)
    call_command("prune_messages", "--dry-run")
    out = capsys.readouterr().out
    assert out.startswith("dry run (delivered and cancelled after 7d, failed after 30d): ")
    assert "would be archived to" in out
    # the real clock: everything in `history` finished days before now
    call_command("prune_messages")
    captured = capsys.readouterr()
    assert "archived" in captured.out and "deleted" in captured.out and "pending or published" in captured.out
    assert "pruning messages" in captured.err  # progress
    assert ScheduledMessage.objects.filter(status__in=["pending", "published"]).count() == 2


def test_the_archive_is_read_as_it_is_by_spark_pandas_and_duckdb(archive, history, spark):
    import duckdb
    import pandas

    go, _ = history
    message_prune(now=NOW)
    expected = sorted((str(m.id), max(m.due_at, m.created_at).date()) for m in go)
    frame = pandas.read_parquet(archive)
    assert sorted(zip(frame["id"], (date.fromisoformat(str(d)) for d in frame["due_date"]))) == expected
    found = duckdb.sql(f"SELECT id, due_date FROM read_parquet('{archive}/*/*.parquet', hive_partitioning = true)")
    assert sorted(found.fetchall()) == expected
    rows = spark.read.parquet(str(archive)).select("id", "due_date", "status").collect()
    assert sorted((r.id, r.due_date) for r in rows) == expected
    assert {r.status for r in rows} == {"delivered", "cancelled", "failed"}


def test_after_the_prune_the_api_says_where_a_message_went_and_its_key_is_free(archive, row, api, settings):
    settings.DELAY_RETENTION = timedelta(days=7)
    gone = row("delivered", created_days=30, finished_days=29, idempotency_key="order-7")
    message_prune()
    for response in (api.get(f"/api/messages/{gone.id}/"), api.post(f"/api/messages/{gone.id}/cancel/"),
                     api.post(f"/api/messages/{gone.id}/republish/")):
        assert response.status_code == 404
        assert response.json() == {"detail": f"no message {gone.id}: finished messages are archived and removed 7d "
                                             "after they finish (DELAY_RETENTION; failed ones after 30d, "
                                             "DELAY_FAILED_RETENTION)"}
    again = api.post("/api/messages/", {"endpoint": gone.endpoint.name, "payload": {}, "delay_seconds": 3600,
                                        "idempotency_key": "order-7"}, format="json")
    assert again.status_code == 201 and again.json()["id"] != str(gone.id)  # unique within the retention only
    assert api.get(f"/api/messages/{again.json()['id']}/").status_code == 200


def test_the_columns_name_every_field_of_a_message():
    fields = {f.attname for f in ScheduledMessage._meta.concrete_fields}
    named = {name for name in columns.COLUMNS} | {"endpoint_id", "topology_id"}
    assert fields <= named, fields - named


def test_expired_admin_sessions_go_with_the_prune(archive):
    from django.contrib.sessions.models import Session
    from django.utils import timezone

    now = timezone.now()  # sessions expire by the clock, not by the prune's cutoff
    Session.objects.create(session_key="old" * 8, session_data="", expire_date=now - timedelta(minutes=1))
    Session.objects.create(session_key="new" * 8, session_data="", expire_date=now + timedelta(days=1))
    message_prune(now=NOW)
    assert list(Session.objects.values_list("session_key", flat=True)) == ["new" * 8]


def test_a_file_that_reads_back_short_deletes_nothing_and_is_removed(archive, row, monkeypatch):
    """The read-back is what allows the delete: a file whose footer counts fewer rows than were
    written (a disk that lost the end) stops the batch before any row goes."""
    from scheduling.archive import parquet

    row("delivered", created_days=9, finished_days=9)
    real = parquet.pq.read_metadata

    class Short:
        def __init__(self, path):
            self.num_rows = real(path).num_rows - 1

    monkeypatch.setattr(parquet.pq, "read_metadata", Short)
    with pytest.raises(PruneError, match=r"reads back 0 rows, not 1"):
        message_prune(now=NOW)
    assert ScheduledMessage.objects.count() == 1 and not ArchiveFile.objects.exists()
    assert not [p for p in archive.rglob("*") if p.is_file()]


def test_finished_bulk_actions_go_with_the_prune_after_the_longest_retention(archive):
    from scheduling.models import BulkAction

    old = BulkAction.objects.create(kind="cancel", filters={}, matched=1, done=1, state="done",
                                    finished_at=NOW - timedelta(days=31))
    BulkAction.objects.create(kind="cancel", filters={}, matched=1, done=1, state="done",
                              finished_at=NOW - timedelta(days=29))  # within the failed messages' 30 days
    BulkAction.objects.create(kind="republish", filters={}, matched=9, done=3)  # running: kept
    message_prune(now=NOW)
    assert BulkAction.objects.count() == 2 and not BulkAction.objects.filter(pk=old.pk).exists()

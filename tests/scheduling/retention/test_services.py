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

from harness.database import database_url
from scheduling.models import AccuracyReport, ArchiveFile, MessageAttempt, ScheduledMessage
from scheduling.reports.accuracy import COUNTS
from scheduling.retention import columns
from scheduling.retention.archives import PruneError
from scheduling.retention.services import PRUNE_LOCK, message_prune
from tests.scheduling.reports.conftest import spark  # noqa: F401 (the session's Spark)

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
        row("expired", created_days=40, finished_days=31, last_error="expired at ..."),  # a dead letter, like failed
        row("superseded", created_days=9, finished_days=8),  # replaced by a newer message: like cancelled
        row("skipped", created_days=9, finished_days=8),  # a schedule's run its overlap did not send: like cancelled
    ]
    stay = [
        row("delivered", created_days=6.9, finished_days=6.9),  # finished within the retention
        row("cancelled", created_days=100, finished_days=1, due_days=-2000),  # a long delay cancelled lately
        row("failed", created_days=20, finished_days=10),  # failed: kept 30 days for a republish
        row("expired", created_days=20, finished_days=10),  # expired: kept as long as the failed
        row("superseded", created_days=6.9, finished_days=6.9),
        row("skipped", created_days=6.9, finished_days=6.9),
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
    assert (result.candidates, result.archived, result.deleted, result.kept_in_flight) == (9, 9, 9, 2)
    assert ArchiveFile.objects.count() == result.files and sum(f.rows for f in ArchiveFile.objects.all()) == 9
    assert all((archive / f.path).stat().st_size == f.bytes for f in ArchiveFile.objects.all())
    assert result.reusable_bytes > 0 and not result.skipped


def test_an_archived_row_has_every_column_as_the_table_had_it(archive, history, endpoint_row):
    go, _ = history
    ScheduledMessage.objects.filter(pk=go[1].pk).update(captured_task=True)
    ScheduledMessage.objects.filter(pk=go[2].pk).update(captured_task=False)
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
        "schedule": None, "due_history": None, "throttled_ms": None, "payload_bytes": None,
        "payload": json.dumps(first.payload),
        "trigger": "scheduled", "call_lease_until": None, "captured_task": None,  # made directly: NULL
        "traceparent": None, "event_id": None, "on_delivered_id": None, "on_failed_id": None, "notification": None,
        "expires_at": None,
        "debounce_key": None, "debounce_mode": None, "debounce_seconds": None, "debounce_max_seconds": None,
        "debounce_until": None, "flow_key": None, "ordering_key": None, "waiting_since": None, "overlap": None,
        "attempt_log": None, "shard": 0,  # none were kept
        "due_date": max(first.due_at, first.created_at).date().isoformat(),  # from the directory's name
    }
    assert json.loads(archived[str(odd.id)]["payload"]) == odd.payload  # quotes, commas, newlines
    assert archived[str(odd.id)]["last_error"] == "NULL"  # text that reads NULL is not a NULL
    assert archived[str(go[2].id)]["idempotency_key"] == "order-1"
    assert (archived[str(go[1].id)]["captured_task"], archived[str(go[2].id)]["captured_task"]) == (True, False)


def attempt(message, *, at: datetime, **fields) -> MessageAttempt:
    values = {"number": 1, "trigger": "scheduled", "duration_ms": 80, "outcome": "ok", "status_code": 200,
              "excerpt": "", "worker": "w1@host", **fields}
    return MessageAttempt.objects.create(message=message, started_at=at, **values)


def test_a_pruned_message_s_attempts_go_with_it_into_its_archive_row(archive, row, settings):
    settings.DELAY_PRUNE_BATCH = 2  # several batches: each deletes its own messages' attempts
    pruned = [row("delivered", created_days=9 + i, finished_days=8) for i in range(3)]
    kept = row("delivered", created_days=2, finished_days=1)
    first = pruned[0]
    at = first.due_at
    attempt(first, at=at + timedelta(seconds=9), number=2, trigger="retry", excerpt='{"ok": true}', duration_ms=41)
    attempt(first, at=at, outcome="http_status", status_code=503, worker="w2@host",
            excerpt='busy, "later"\nline 2 — ünïcode')
    attempt(pruned[1], at=at, outcome="timeout", status_code=None, excerpt="deadline 5 s")
    attempt(kept, at=at, excerpt="kept with its message")

    result = message_prune(now=NOW)

    assert result.deleted == 3
    # no attempt left behind (ordered by id: the model's ordering joins the messages, hiding orphans)
    assert list(MessageAttempt.objects.order_by("id").values_list("message_id", flat=True)) == [kept.id]
    archived = archive_rows(archive)
    assert json.loads(archived[str(first.id)]["attempt_log"]) == [  # in the order they were made
        {"number": 1, "trigger": "scheduled", "started_at": at.isoformat(), "duration_ms": 80,
         "outcome": "http_status", "status_code": 503, "excerpt": 'busy, "later"\nline 2 — ünïcode',
         "worker": "w2@host"},
        {"number": 2, "trigger": "retry", "started_at": (at + timedelta(seconds=9)).isoformat(), "duration_ms": 41,
         "outcome": "ok", "status_code": 200, "excerpt": '{"ok": true}', "worker": "w1@host"}]
    (timed_out,) = json.loads(archived[str(pruned[1].id)]["attempt_log"])
    assert (timed_out["outcome"], timed_out["status_code"]) == ("timeout", None)
    assert archived[str(pruned[2].id)]["attempt_log"] is None  # none made


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
    assert (result.candidates, result.archived, result.deleted, result.kept_in_flight) == (9, 0, 0, 2)
    assert ScheduledMessage.objects.count() == 17 and not archive.exists() and not ArchiveFile.objects.exists()


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


def test_the_archive_is_read_as_it_is_by_spark_pandas_and_duckdb(archive, history, spark):  # noqa: F811 (the fixture)
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
    assert {r.status for r in rows} == {"delivered", "cancelled", "failed", "expired", "superseded", "skipped"}


def test_after_the_prune_the_api_says_where_a_message_went_and_its_key_is_free(archive, row, api, settings):
    settings.DELAY_RETENTION = timedelta(days=7)
    gone = row("delivered", created_days=30, finished_days=29, idempotency_key="order-7")
    message_prune()
    for response in (api.get(f"/api/messages/{gone.id}/"), api.post(f"/api/messages/{gone.id}/cancel/"),
                     api.post(f"/api/messages/{gone.id}/republish/")):
        assert response.status_code == 404
        assert response.json() == {"detail": f"no message {gone.id}: finished messages are archived and removed 7d "
                                             "after they finish (DELAY_RETENTION; failed and expired ones after 30d, "
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
    from scheduling.retention import parquet

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


# --- the audit log ------------------------------------------------------------------------------


def audit_archive_rows(archive) -> dict[int, dict]:
    """The audit archive read as any Parquet reader reads a directory, by id; an id twice fails."""
    table = ds.dataset(archive / "_audit", format="parquet", partitioning="hive").to_table()
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "an audit row archived twice"
    return {row["id"]: row for row in table.to_pylist()}


@pytest.fixture
def audit_row(settings):
    from scheduling.models import AuditEvent

    settings.DELAY_AUDIT_RETENTION = timedelta(days=400)

    def make(days: float, **fields) -> AuditEvent:
        values = {"source": "api", "actor": "alice (key dpk_abc)", "action": "endpoint.update", **fields}
        return AuditEvent.objects.create(at=NOW - timedelta(days=days), **values)

    return make


@pytest.fixture
def audit_history(audit_row):
    """(rows that must go: made more than 400 days before NOW, rows that must stay)."""
    go = [
        audit_row(401, user_id=7, key_prefix="dpk_abc", team_id=3, team_name="growth-eu", object_type="endpoint",
                  object_id="12", object_repr='orders "eu",\nsecond line', ip="10.0.0.7",
                  user_agent='curl/8.5, "quoted"', request_id="req-1",
                  before={"max_in_flight": 5, "names": ["a", "é"], "nested": {"quote": '"', "none": None}},
                  after={"max_in_flight": 9, "text": "line\nbreak, comma"}, extra=[1, {"filter": "status=failed"}]),
        audit_row(401.2, source="command", actor="create_team", ip="2001:db8::1"),  # empty and null fields
        audit_row(402),
        audit_row(450, source="admin", actor="ops", user_id=1, after={"secret": "<redacted>"}),
        audit_row(700),
        audit_row(401.1, before=[], after={}, extra="just text"),  # JSON that is not an object
    ]
    stay = [audit_row(399.9), audit_row(30), audit_row(0)]
    return go, stay


def test_the_audit_log_past_its_retention_is_archived_then_deleted(archive, audit_history, settings):
    from scheduling.models import AuditArchiveFile, AuditEvent
    from scheduling.retention import audit_columns

    go, stay = audit_history
    settings.DELAY_PRUNE_BATCH = 2  # several batches: where each starts is exercised
    before = AuditEvent.objects.count()

    result = message_prune(now=NOW)

    assert sorted(AuditEvent.objects.values_list("id", flat=True)) == sorted(e.id for e in stay)
    archived = audit_archive_rows(archive)
    assert set(archived) == {e.id for e in go}
    assert AuditEvent.objects.count() + len(archived) == before  # nothing lost, nothing twice
    assert (result.audit_candidates, result.audit_archived, result.audit_deleted) == (6, 6, 6)
    files = list(AuditArchiveFile.objects.all())
    assert len(files) == result.audit_files and sum(f.rows for f in files) == 6
    assert sum(f.bytes for f in files) == result.audit_archive_bytes
    for f in files:
        assert f.path.startswith(f"_audit/at_date={f.day.isoformat()}/part-") and f.path.endswith(".parquet")
        assert (archive / f.path).stat().st_size == f.bytes
    assert {f.day for f in files} == {e.at.date() for e in go}
    assert set(audit_columns.COLUMNS) == {f.attname for f in AuditEvent._meta.concrete_fields}  # every column
    assert not ArchiveFile.objects.exists() and result.archived == 0  # the messages' list is the messages'


def test_an_archived_audit_row_has_every_value_the_table_had(archive, audit_history):
    from scheduling.models import AuditEvent

    go, _ = audit_history
    expected = {row["id"]: row for row in AuditEvent.objects.filter(id__in=[e.id for e in go]).values()}
    message_prune(now=NOW)

    archived = audit_archive_rows(archive)
    json_columns = ("before", "after", "extra")
    for id_, row in expected.items():
        got = dict(archived[id_])
        assert got.pop("at_date") == row["at"].date().isoformat()  # from the directory's name
        for name in json_columns:  # JSON as JSON text, read back intact
            text = got.pop(name)
            assert (json.loads(text) if text is not None else None) == row.pop(name)
        assert got == row
    assert archived[go[0].id]["object_repr"] == 'orders "eu",\nsecond line'
    assert archived[go[1].id]["ip"] == "2001:db8::1" and archived[go[1].id]["user_id"] is None
    assert archived[go[1].id]["key_prefix"] == "" and archived[go[1].id]["before"] is None  # "" is not NULL


def test_the_audit_archive_reads_with_pandas_and_duckdb_and_is_never_read_as_messages(archive, audit_history,
                                                                                     history, spark):  # noqa: F811
    import duckdb
    import pandas

    from scheduling.reports.facts import archive_file_list

    go, _ = audit_history
    messages, _ = history
    message_prune(now=NOW)

    frame = pandas.read_parquet(archive / "_audit")
    assert sorted(frame["id"]) == sorted(e.id for e in go)
    assert json.loads(frame.set_index("id").loc[go[0].id, "before"])["names"] == ["a", "é"]
    found = duckdb.sql(f"SELECT id, at_date FROM read_parquet('{archive}/_audit/*/*.parquet', hive_partitioning = true)")
    assert sorted(found.fetchall()) == sorted((e.id, e.at.date()) for e in go)
    # the archive read as a whole, as the page says, is the messages' only
    expected = sorted(str(m.id) for m in messages)
    assert sorted(pandas.read_parquet(archive)["id"]) == expected
    assert sorted(r.id for r in spark.read.parquet(str(archive)).select("id").collect()) == expected
    listed = archive_file_list(first_day=date(2000, 1, 1), last_day=date(2100, 1, 1))
    assert listed and not [f for f in listed if "audit" in f.path]


def test_a_second_prune_leaves_the_audit_log_and_its_archive_alone(archive, audit_history):
    from scheduling.models import AuditArchiveFile, AuditEvent

    message_prune(now=NOW)
    files = sorted(p for p in archive.rglob("*") if p.is_file())
    rows, listed = AuditEvent.objects.count(), list(AuditArchiveFile.objects.values_list("path", flat=True))

    again = message_prune(now=NOW)

    assert (again.audit_candidates, again.audit_archived, again.audit_deleted, again.audit_files) == (0, 0, 0, 0)
    assert again.orphans_removed == 0 and again.audit_days_removed == 0
    assert sorted(p for p in archive.rglob("*") if p.is_file()) == files
    assert AuditEvent.objects.count() == rows
    assert list(AuditArchiveFile.objects.values_list("path", flat=True)) == listed


def test_outside_the_prune_the_audit_log_still_refuses_updates_and_deletes(archive, audit_history):
    """After a prune in the same transaction (this test's), too: the prune's leave to delete
    lasted for its DELETE only."""
    from django.db import DatabaseError, transaction

    from scheduling.models import AuditEvent

    _, stay = audit_history
    message_prune(now=NOW)
    for sql in ("UPDATE scheduling_auditevent SET actor = 'mallory' WHERE id = %s",
                "DELETE FROM scheduling_auditevent WHERE id = %s"):
        with pytest.raises(DatabaseError, match="the audit log is append-only"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(sql, [stay[0].id])
    assert AuditEvent.objects.get(id=stay[0].id).actor == "alice (key dpk_abc)"
    assert AuditEvent.objects.count() == len(stay)


def test_a_dry_run_counts_the_audit_log_and_changes_nothing(archive, audit_history):
    from scheduling.models import AuditArchiveFile, AuditEvent

    result = message_prune(now=NOW, dry_run=True)
    assert (result.audit_candidates, result.audit_archived, result.audit_deleted) == (6, 0, 0)
    assert AuditEvent.objects.count() == 9 and not archive.exists() and not AuditArchiveFile.objects.exists()


def test_an_audit_batch_that_does_not_commit_leaves_its_rows_and_no_file(archive, audit_history, monkeypatch):
    from scheduling.models import AuditArchiveFile, AuditEvent

    def refuse(self):
        raise PruneError("the disk of the database is full")

    monkeypatch.setattr(type(AuditEvent.objects.all()), "delete_prune_batch", refuse)
    with pytest.raises(PruneError, match="disk of the database"):
        message_prune(now=NOW)
    assert AuditEvent.objects.count() == 9 and not AuditArchiveFile.objects.exists()
    assert not [p for p in archive.rglob("*") if p.is_file()]


def test_audit_files_of_a_killed_run_are_removed_before_anything_is_written(archive, audit_row):
    from scheduling.models import AuditArchiveFile, AuditEvent

    old = audit_row(401)
    day = archive / "_audit" / "at_date=2025-01-01"
    day.mkdir(parents=True)
    (day / "part-listed.parquet").write_bytes(b"kept")
    AuditArchiveFile.objects.create(path="_audit/at_date=2025-01-01/part-listed.parquet", day=date(2025, 1, 1),
                                    rows=1, bytes=4)
    (day / "part-unlisted.parquet").write_bytes(b"a killed run's")
    (day / ".part-half.parquet.tmp").write_bytes(b"half")

    result = message_prune(now=NOW)

    assert result.orphans_removed == 2
    assert sorted(p.name for p in day.iterdir()) == ["part-listed.parquet"]
    assert result.audit_deleted == 1 and not AuditEvent.objects.filter(id=old.id).exists()
    (written,) = AuditArchiveFile.objects.exclude(path__contains="listed")
    assert (archive / written.path).exists() and written.rows == 1


def test_audit_archive_days_go_archive_retention_after_they_left_the_table(archive, settings, audit_row):
    """DELAY_ARCHIVE_RETENTION counts from the day's leaving the table (DELAY_AUDIT_RETENTION
    after it): with both at 400 days, a day made 801 days ago goes, one made 799 days ago stays."""
    from scheduling.models import AuditArchiveFile

    settings.DELAY_ARCHIVE_RETENTION = timedelta(days=400)
    days = {"old": (NOW - timedelta(days=801)).date(), "kept": (NOW - timedelta(days=799)).date()}
    for name, day in days.items():
        path = f"_audit/at_date={day.isoformat()}/part-{name}.parquet"
        (archive / path).parent.mkdir(parents=True)
        (archive / path).write_bytes(b"x")
        AuditArchiveFile.objects.create(path=path, day=day, rows=1, bytes=1)
    archived_now = audit_row(401)  # archived by this run, and kept

    result = message_prune(now=NOW)

    assert result.audit_days_removed == 1 and result.archive_days_removed == 0
    assert sorted(f.day for f in AuditArchiveFile.objects.all()) == sorted([days["kept"], archived_now.at.date()])
    assert sorted(p.name for p in (archive / "_audit").iterdir()) == sorted(
        f"at_date={d.isoformat()}" for d in (days["kept"], archived_now.at.date()))


def test_the_command_prints_the_audit_log_s_figures(archive, audit_row, capsys):
    from django.utils import timezone

    from scheduling.models import AuditEvent

    for days in (401, 401, 500, 1):  # the real clock: the command prunes as of now
        AuditEvent.objects.create(at=timezone.now() - timedelta(days=days), source="api", actor="a", action="x.y")
    call_command("prune_messages", "--dry-run")
    out = capsys.readouterr().out
    assert f"dry run (audit log, changes older than 400d): 3 rows would be archived to {archive}/_audit" in out
    call_command("prune_messages")
    captured = capsys.readouterr()
    assert "  audit log             3 rows (changes older than 400d) archived in 2 file(s), " in captured.out
    assert f"to {archive}/_audit; 3 deleted" in captured.out
    assert "pruning the audit log: 3/3" in captured.err and "pruning messages: 0/0" in captured.err  # progress
    # the recent row stays, and the run is recorded (a dry run is not: it changed nothing)
    assert list(AuditEvent.objects.order_by("at").values_list("action", flat=True)) == ["x.y", "command.prune_messages"]


def test_a_message_s_own_audit_events_go_with_the_messages_retention(archive, audit_row, settings):
    """A row per scheduling request kept DELAY_AUDIT_RETENTION would outgrow the messages: those
    rows (and single cancels, republishes, reschedules) go after the messages' retention."""
    from scheduling.audit.selectors import TRAFFIC_ACTIONS
    from scheduling.models import AuditEvent

    settings.DELAY_RETENTION, settings.DELAY_FAILED_RETENTION = timedelta(days=7), timedelta(days=30)
    traffic_old = [audit_row(31, action=action) for action in TRAFFIC_ACTIONS]
    traffic_recent = audit_row(29, action="message.schedule")  # within the failed messages' 30 days
    changes = [audit_row(31, action="message.bulk_cancel"), audit_row(31, action="endpoint.rotate_secret")]
    result = message_prune(now=NOW)
    assert set(AuditEvent.objects.values_list("id", flat=True)) == {traffic_recent.id, *(e.id for e in changes)}
    assert set(audit_archive_rows(archive)) == {e.id for e in traffic_old}  # archived, not lost
    assert result.audit_deleted == len(TRAFFIC_ACTIONS)

"""export_deliveries: facts to Parquet per due date, read back by pyarrow and by the Spark job."""

import subprocess
import sys
from datetime import date, datetime, timedelta, timezone

import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command

from harness.paths import ROOT
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.reports import export
from scheduling.reports.accuracy import FACTS_SCHEMA, read_facts
from scheduling.reports.facts import message_list_due_between
from scheduling.retention import columns

pytestmark = pytest.mark.django_db
DAY1, DAY2, DAY3 = date(2026, 11, 18), date(2026, 11, 19), date(2026, 11, 20)


def at(day: date, hour: int, ms: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, tzinfo=timezone.utc) + timedelta(milliseconds=ms)


@pytest.fixture
def message(versions):
    endpoints = {}

    def make(due_at: datetime, endpoint="billing", version="v2", **fields) -> ScheduledMessage:
        if endpoint not in endpoints:
            endpoints[endpoint] = Endpoint.objects.create(name=endpoint, queue=endpoint, topology=versions[version])
        fields.setdefault("requested_delay_ms", 5_000)
        fields.setdefault("created_at", due_at - timedelta(milliseconds=fields["requested_delay_ms"]))
        return ScheduledMessage.objects.create(
            endpoint=endpoints[endpoint], topology=versions[version], payload={}, due_at=due_at, **fields
        )

    return make


def read_day(out, day: date) -> list[dict]:
    return pq.read_table(export.partition_dir(out, day) / "part-0.parquet").to_pylist()


def test_each_due_date_gets_a_partition_with_the_facts(message, tmp_path):
    delivered = message(
        at(DAY1, 23, 999),
        status="delivered",
        published_at=at(DAY1, 22),
        delivered_at=at(DAY1, 23, 1_003),
        lateness_ms=4,
        delivery_count=2,
    )
    cancelled = message(
        at(DAY1, 0), endpoint="audit", version="v1", status="cancelled", cancelled_at=at(DAY1, 0),
        delivery_mode="timeout_manager",
    )
    message(at(DAY2, 0), status="published")
    message(at(DAY3 + timedelta(days=1), 0), status="pending")  # after the range

    result = export.deliveries_export(first_day=DAY1, last_day=DAY3, out_dir=tmp_path)

    assert result.rows_by_day == {DAY1: 2, DAY2: 1, DAY3: 0}
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"due_date={d}" for d in (DAY1, DAY2, DAY3)]
    rows = {row["id"]: row for row in read_day(tmp_path, DAY1)}
    assert rows[str(delivered.id)] == {
        "id": str(delivered.id),
        "team": "default",  # the endpoint's team's name
        "endpoint": "billing",
        "endpoint_id": delivered.endpoint_id,
        "version": "v2",
        "topology_id": delivered.topology_id,
        "delivery_mode": "native",
        "requested_delay_ms": 5_000,
        "due_at": at(DAY1, 23, 999),
        "created_at": at(DAY1, 23, 999 - 5_000),
        "published_at": at(DAY1, 22),
        "delivered_at": at(DAY1, 23, 1_003),
        "cancelled_at": None,
        "finished_at": None,
        "status": "delivered",
        "lateness_ms": 4,
        "delivery_count": 2,
        "attempts": 0,
        "delivered_by": "",
        "routing_key": "",
        "first_exchange": "",
        "idempotency_key": None,
        "last_error": "",
        "schedule": None,
        "due_history": None,
        "throttled_ms": None,
        "payload_bytes": None,  # rows made directly (the scheduling service sets it)
        "payload": None,  # the report does not read payloads (the archive keeps them)
        "trigger": "scheduled",
        "call_lease_until": None,
        "captured_task": None,  # a row made directly, as by the release before the column
        "traceparent": None,  # scheduled with no trace
        "event_id": None,  # no event's fan-out
        "on_delivered_id": None,  # no callbacks
        "on_failed_id": None,
        "notification": None,  # not a notification
        "expires_at": None,  # never expires
        "debounce_key": None, "debounce_mode": None, "debounce_seconds": None, "debounce_max_seconds": None,
        "debounce_until": None,  # not debounced
        "flow_key": None,  # no flow key
        "ordering_key": None, "waiting_since": None, "overlap": None,  # no ordering key, not a run with a policy
        "attempt_log": None,  # nor attempts
        "shard": 0,  # v2 has one shard here
    }
    assert rows[str(cancelled.id)]["status"] == "cancelled" and rows[str(cancelled.id)]["endpoint"] == "audit"
    assert rows[str(cancelled.id)]["delivery_mode"] == "timeout_manager"  # as recorded on the row
    assert read_day(tmp_path, DAY3) == []  # an empty day is an empty file, not a missing one


def test_a_message_scheduled_in_the_past_counts_on_the_day_it_was_accepted(message, tmp_path):
    """Its report day is the later of due_at and created_at (the lifecycle's rule): a backdated
    message is counted by the run of the day it arrived, with its requested due time kept."""
    backdated = message(at(DAY1, 5), created_at=at(DAY2, 3), requested_delay_ms=0)
    same_day = message(at(DAY1, 5), created_at=at(DAY1, 6), requested_delay_ms=0)
    from_before = message(at(DAY1, 5) - timedelta(days=30), created_at=at(DAY1, 7), requested_delay_ms=0)
    message(at(DAY2, 5), created_at=at(DAY3 + timedelta(days=1), 1), requested_delay_ms=0)  # accepted after
    message(at(DAY1, 0) - timedelta(days=1), requested_delay_ms=0)  # due and accepted before

    result = export.deliveries_export(first_day=DAY1, last_day=DAY3, out_dir=tmp_path)

    assert result.rows_by_day == {DAY1: 2, DAY2: 1, DAY3: 0}
    assert {r["id"] for r in read_day(tmp_path, DAY1)} == {str(same_day.id), str(from_before.id)}
    (row,) = read_day(tmp_path, DAY2)
    assert (row["id"], row["due_at"], row["created_at"]) == (str(backdated.id), at(DAY1, 5), at(DAY2, 3))


def test_re_exporting_a_day_replaces_only_that_day(message, tmp_path):
    first = message(at(DAY1, 1), status="published")
    message(at(DAY2, 1), status="published")
    export.deliveries_export(first_day=DAY1, last_day=DAY2, out_dir=tmp_path)
    day2_file = export.partition_dir(tmp_path, DAY2) / "part-0.parquet"
    day2_written = day2_file.stat().st_mtime_ns

    ScheduledMessage.objects.filter(id=first.id).update(
        status="delivered", delivered_at=at(DAY1, 1), lateness_ms=2
    )
    second = message(at(DAY1, 2), status="pending")
    export.deliveries_export(first_day=DAY1, last_day=DAY1, out_dir=tmp_path)

    assert {(r["id"], r["status"]) for r in read_day(tmp_path, DAY1)} == {
        (str(first.id), "delivered"),
        (str(second.id), "pending"),
    }
    assert day2_file.stat().st_mtime_ns == day2_written
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_the_spark_job_reads_the_export_with_its_schema(message, tmp_path, spark):
    message(at(DAY1, 3), status="delivered", delivered_at=at(DAY1, 3, 5), lateness_ms=5, delivery_count=1)
    message(at(DAY1, 4), status="pending")
    export.deliveries_export(first_day=DAY1, last_day=DAY1, out_dir=tmp_path)

    inferred = {f.name: f.dataType for f in spark.read.parquet(str(tmp_path)).schema}
    assert all(inferred[f.name] == f.dataType for f in FACTS_SCHEMA)  # the archive's columns, a superset
    facts = read_facts(spark, str(tmp_path), DAY1, DAY1)
    assert sorted((r.status, r.lateness_ms, r.due_date) for r in facts.collect()) == [
        ("delivered", 5, DAY1),
        ("pending", None, DAY1),
    ]


def test_copy_stream_gives_the_rows_the_orm_reads(message):
    """COPY ... TO STDOUT parsed as CSV by pyarrow must give back exactly what the database holds
    (types, NULLs, time zones), checked against the same query through the ORM."""
    message(
        at(DAY1, 5), status="delivered", delivered_at=at(DAY1, 5, 7), lateness_ms=7, published_at=at(DAY1, 4)
    )
    message(at(DAY1, 6), endpoint="audit", version="v1", status="cancelled", cancelled_at=at(DAY1, 1))
    since, until = at(DAY1, 0), at(DAY2, 0)
    copied = sorted((row for batch in export.fact_batches(since, until) for row in batch.to_pylist()),
                    key=lambda row: row["id"])
    names = {"team": "endpoint__team__name", "endpoint": "endpoint__name", "version": "topology__name"}
    fields = [names.get(column, column) for column in columns.COLUMNS if column != "payload"]
    orm = sorted(message_list_due_between(since=since, until=until).values(*fields),
                 key=lambda row: str(row["id"]))
    for row in orm:
        for column, field in names.items():
            row[column] = row.pop(field)
        row["id"] = str(row["id"])
        row["payload"], row["shard"] = None, 0  # no payloads in the report's export; one shard per version
    assert len(copied) == 2 and copied == [{column: row[column] for column in copied[0]} for row in orm]


def test_each_fact_names_its_team_and_team_exports_one_teams_only(message, versions, tmp_path, capsys):
    """Two teams each with an endpoint billing: the facts tell them apart by team, and
    ``--team`` exports that team's messages only."""
    from scheduling.models import Team

    other = Team.objects.create(name="growth-eu")
    theirs = Endpoint.objects.create(team=other, name="billing", queue="growth-eu--billing", topology=versions["v2"])
    ours = message(at(DAY1, 1), status="pending")
    ScheduledMessage.objects.create(endpoint=theirs, topology=versions["v2"], payload={}, due_at=at(DAY1, 2),
                                    created_at=at(DAY1, 1), requested_delay_ms=3_600_000)

    export.deliveries_export(first_day=DAY1, last_day=DAY1, out_dir=tmp_path / "all")
    assert sorted((r["team"], r["endpoint"]) for r in read_day(tmp_path / "all", DAY1)) == [
        ("default", "billing"), ("growth-eu", "billing")]

    call_command("export_deliveries", "--since", str(DAY1), "--until", str(DAY1), "--team", "default",
                 "--out", str(tmp_path / "ours"), "--no-progress")
    assert [(r["id"], r["team"]) for r in read_day(tmp_path / "ours", DAY1)] == [(str(ours.id), "default")]
    assert "exported 1 rows of team default for 1 day(s)" in capsys.readouterr().out
    call_command("export_deliveries", "--since", str(DAY1), "--until", str(DAY1), "--team", "growth-eu",
                 "--out", str(tmp_path / "theirs"), "--no-progress")
    assert [r["team"] for r in read_day(tmp_path / "theirs", DAY1)] == ["growth-eu"]
    with pytest.raises(CommandError, match=r"^no team 'nobody'"):
        call_command("export_deliveries", "--since", str(DAY1), "--team", "nobody", "--out", str(tmp_path / "x"))


def test_progress_bar_counts_rows(message, tmp_path, capsys):
    message(at(DAY1, 7), status="pending")
    call_command("export_deliveries", "--since", str(DAY1), "--until", str(DAY1), "--out", str(tmp_path))
    captured = capsys.readouterr()
    assert "exporting deliveries" in captured.err and "1/1" in captured.err
    assert "exported 1 rows for 1 day(s)" in captured.out


@pytest.mark.parametrize(
    "args, error",
    [
        (["--since", "2026-13-01"], "--since: not a date (YYYY-MM-DD): '2026-13-01'"),
        (["--since", "2026-11-20", "--until", "yesterday"], "--until: not a date (YYYY-MM-DD): 'yesterday'"),
        (
            ["--since", "2026-11-20", "--until", "2026-11-19"],
            "--until 2026-11-19 is before --since 2026-11-20",
        ),
    ],
)
def test_bad_dates_are_one_line_errors(args, error, tmp_path):
    with pytest.raises(CommandError) as raised:
        call_command("export_deliveries", *args, "--out", str(tmp_path))
    assert str(raised.value) == error


def test_an_unwritable_directory_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(CommandError, match=r"^cannot write to .*a-file/out: Not a directory$"):
        call_command("export_deliveries", "--since", "2026-11-20", "--out", str(blocker / "out"))


def test_the_command_line_exits_1_without_a_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "export_deliveries", "--since", "20-11-2026", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == "CommandError: --since: not a date (YYYY-MM-DD): '20-11-2026'"


def test_a_sharded_versions_deliveries_all_count_under_that_version(message, tmp_path, spark, settings):
    """v3 with two shards: each fact says its shard (from its id), and the report's rows stay
    per version, counting the deliveries of both shards."""
    import uuid

    from scheduling.reports.accuracy import accuracy_report

    settings.DELAY_SHARDS = "v3=2"
    sharded = [message(at(DAY1, 9, n), endpoint="orders.eu", version="v3", id=uuid.UUID(int=n), status="delivered",
                       published_at=at(DAY1, 8), delivered_at=at(DAY1, 9, n + 3), lateness_ms=3, delivery_count=1)
               for n in range(7)]
    message(at(DAY1, 9), status="delivered", published_at=at(DAY1, 8), delivered_at=at(DAY1, 9, 2), lateness_ms=2,
            delivery_count=1)  # v2: one shard
    export.deliveries_export(first_day=DAY1, last_day=DAY1, out_dir=tmp_path)

    facts = {row["id"]: row for row in read_day(tmp_path, DAY1)}
    assert {facts[str(m.id)]["shard"] for m in sharded} == {0, 1}
    assert all(facts[str(m.id)]["shard"] == m.id.int % 2 for m in sharded)
    assert [row["shard"] for row in facts.values() if row["version"] == "v2"] == [0]

    report = accuracy_report(read_facts(spark, str(tmp_path), DAY1, DAY1), as_of=at(DAY2, 0),
                             lost_after=timedelta(minutes=10))
    per_version = {row.version: row for row in report.collect() if row.endpoint == "*" and row.delivery_mode == "*"
                   and row.delay_bucket == "*" and row.version != "*"}
    assert (per_version["v3"].scheduled, per_version["v3"].delivered, per_version["v3"].lost) == (7, 7, 0)
    assert per_version["v2"].delivered == 1
    assert "shard" not in report.columns  # rows per version, not per shard

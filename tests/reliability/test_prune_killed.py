"""The prune killed (SIGKILL) at each step of a batch, at random moments, and run twice at once:
after a clean run, every finished message past its retention is in the archive exactly once and
gone from the table, every other message is still there, and no temporary or unlisted file is
left. The archive is read as any Parquet reader reads it (the directory, not the platform's list),
so a file left behind by a killed run would be counted. The audit log's prune, killed between
writing a file and its commit, likewise."""

import os
import random
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pyarrow.dataset as ds
import pytest
from django.db import connection
from django.utils import timezone

from harness.database import database_url
from harness.paths import ROOT
from scheduling.models import ArchiveFile, AuditArchiveFile, AuditEvent, Endpoint, ScheduledMessage

from .conftest import size

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def rows(versions, endpoint_name):
    """finished past retention (must go) and kept (must stay), committed for other processes."""
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"])
    now = timezone.now()

    def make(n, status, created_days, finished_days):
        created = now - timedelta(days=created_days)
        return ScheduledMessage.objects.bulk_create([ScheduledMessage(
            endpoint=endpoint, topology=endpoint.topology, payload={"n": i}, status=status, created_at=created,
            due_at=created + timedelta(seconds=i % 90_000), requested_delay_ms=(i % 90_000) * 1000,
            finished_at=None if finished_days is None else now - timedelta(days=finished_days),
        ) for i in range(n)], batch_size=5000)

    def build(n):
        go = make(n, "delivered", 9, 8) + make(n // 10, "cancelled", 20, 8) + make(n // 20, "failed", 60, 40)
        stay = make(50, "delivered", 5, 4) + make(50, "published", 30, None) + make(20, "failed", 20, 10)
        return {m.id for m in go}, {m.id for m in stay}

    return build


def child_env(archive) -> dict:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "delayplatform.settings_test",
            "DATABASE_URL": database_url(connection.settings_dict), "DELAY_ARCHIVE_DIR": str(archive),
            "DELAY_RETENTION": "7d", "DELAY_FAILED_RETENTION": "30d", "DELAY_PRUNE_BATCH": "500",
            "DELAY_AUDIT_RETENTION": "400d", "DELAY_ARCHIVE_RETENTION": "400d",
            "LOG_LEVEL": "WARNING"}


def prune(archive, point: str = "none") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.reliability.prune_child", point], cwd=ROOT,
                            env=child_env(archive), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def assert_exact(archive, go: set, stay: set) -> None:
    remaining = set(ScheduledMessage.objects.values_list("id", flat=True))
    assert remaining == stay, f"{len(go & remaining)} not pruned, {len(stay - remaining)} kept ones lost"
    files = [p for p in archive.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.startswith(".")], "a temporary file was left"
    listed = {str(archive / f.path) for f in ArchiveFile.objects.all()}
    assert {str(p) for p in files} == listed, "a file on disk that the archive does not list, or the reverse"
    ids = ds.dataset(archive, format="parquet", partitioning="hive").to_table(columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} messages archived twice"
    assert set(ids) == {str(i) for i in go}, "archived messages differ from those past their retention"


@pytest.fixture
def audit_rows():
    """Audit rows past DELAY_AUDIT_RETENTION (must go, over several days) and within it (must
    stay), committed for other processes."""
    now = timezone.now()

    def make(n, days):
        return AuditEvent.objects.bulk_create([AuditEvent(
            at=now - timedelta(days=days + i % 5, seconds=i), source="api", actor=f"user-{i % 7}",
            action="endpoint.update", object_type="endpoint", object_id=str(i), before={"n": i}, after={"n": i + 1},
        ) for i in range(n)], batch_size=5000)

    def build(n):
        return {e.id for e in make(n, 401)}, {e.id for e in make(30, 10)}

    return build


def assert_audit_exact(archive, go: set, stay: set) -> None:
    remaining = set(AuditEvent.objects.values_list("id", flat=True))
    assert remaining == stay, f"{len(go & remaining)} not pruned, {len(stay - remaining)} kept ones lost"
    files = [p for p in archive.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.startswith(".")], "a temporary file was left"
    listed = {str(archive / f.path) for f in AuditArchiveFile.objects.all()}
    listed |= {str(archive / f.path) for f in ArchiveFile.objects.all()}
    assert {str(p) for p in files} == listed, "a file on disk that the archive does not list, or the reverse"
    dataset = ds.dataset(archive / "_audit", format="parquet", partitioning="hive")
    ids = dataset.to_table(columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} audit rows archived twice"
    assert set(ids) == go, "archived audit rows differ from those past their retention"


@pytest.mark.parametrize("point", ["audit-renamed", "audit-deleted"])
def test_an_audit_prune_killed_before_its_commit_then_run_again_loses_and_doubles_nothing(audit_rows, tmp_path,
                                                                                         point):
    """Killed with its first audit file written, durable and in place (not yet listed, or listed
    and its rows deleted but not committed): the rows are all still in the table, the file is an
    orphan, and the next prune removes it and archives each row once."""
    go, stay = audit_rows(1200)
    archive = tmp_path / "archive"
    killed = prune(archive, point)
    killed.wait(120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.read()
    assert AuditEvent.objects.count() == len(go) + len(stay) and not AuditArchiveFile.objects.exists()
    assert list((archive / "_audit").rglob("part-*.parquet")), "the killed run's file is not on disk"

    again = prune(archive)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert f"audit_archived={len(go)}" in out
    assert_audit_exact(archive, go, stay)


@pytest.mark.parametrize("point", ["writing", "renamed", "deleted", "committed"])
def test_killed_at_each_step_then_run_again_loses_and_doubles_nothing(rows, tmp_path, point):
    go, stay = rows(2000)
    archive = tmp_path / "archive"
    killed = prune(archive, point)
    killed.wait(120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.read()
    if point == "committed":
        assert ArchiveFile.objects.exists()  # the first batch is committed
    else:
        assert ScheduledMessage.objects.count() == len(go) + len(stay) and not ArchiveFile.objects.exists()

    again = prune(archive)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert_exact(archive, go, stay)


def test_killed_at_random_moments_then_run_again_loses_and_doubles_nothing(rows, tmp_path, report):
    from .conftest import Counts

    go, stay = rows(size(60_000, 12_000))
    archive = tmp_path / "archive"
    rng, kills = random.Random(20), 0
    for _ in range(size(10, 4)):
        child, listed = prune(archive), ArchiveFile.objects.count()
        while ArchiveFile.objects.count() == listed and child.poll() is None:  # until it has committed a batch
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.15))  # then anywhere in the next few batches' steps
        if child.poll() is not None:
            break
        child.send_signal(signal.SIGKILL)
        child.wait(60)
        kills += 1
    final = prune(archive)
    out, err = final.communicate(timeout=600)
    assert final.returncode == 0, err
    assert_exact(archive, go, stay)
    report(Counts(f"prune SIGKILLed {kills} times", len(go), 0, 0, 0, 0, None,
                  note=f"{ArchiveFile.objects.count()} files, {len(stay)} kept"))
    assert kills >= 2


def test_two_prunes_at_once_archive_each_message_once(rows, tmp_path):
    go, stay = rows(size(30_000, 6_000))
    archive = tmp_path / "archive"
    first, second = prune(archive), prune(archive)
    outputs = [p.communicate(timeout=600) for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outputs
    assert_exact(archive, go, stay)
    summaries = sorted(out.strip() for out, _ in outputs)
    # the second found the first holding the lock, or started after it had finished everything
    assert summaries[1].startswith("skipped=True") or summaries[0].startswith("skipped=False archived=0"), summaries

"""Every command on a database it cannot use (not migrated, or unreachable): one line on stderr
and exit 1, never a traceback. Run as a user would (python manage.py ...) against a fresh empty
database of the test's own, with a broker address nothing listens on: a command that touched
the broker before finding the database unusable would say so instead."""

import importlib
import os
import pkgutil
import subprocess
import sys
import uuid

import psycopg
import pytest

import scheduling.management.commands as commands
from harness.paths import ROOT
from scheduling.management.commands._base import NOT_MIGRATED, PlatformCommand

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
NO_BROKER = "amqp://guest:guest@127.0.0.1:1/nowhere"
# commands that never touch the database (a probe of the worker through the broker; a page of the docs)
WITHOUT_DATABASE = {"worker_health", "settings_reference"}


@pytest.fixture(scope="module")
def empty_database():
    name = f"dp_unmigrated_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield f"postgres://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_all(database_url: str, *argvs: list[str]) -> list[subprocess.CompletedProcess]:
    """The commands side by side (each is a Django start-up of a second or two)."""
    env = {**os.environ, "DATABASE_URL": database_url, "BROKER_URL": NO_BROKER}
    started = [subprocess.Popen([sys.executable, "manage.py", *argv], cwd=ROOT, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for argv in argvs]
    results = []
    for argv, process in zip(argvs, started):
        out, err = process.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(argv, process.returncode, out, err))
    return results


def test_commands_before_migrate_say_so_in_one_line(empty_database, tmp_path):
    results = run_all(
        empty_database,
        ["provision_delays"],  # the case: it must not declare the cascade first
        ["schedule_message", "billing", "--delay", "1"],
        ["cancel_message", str(uuid.uuid4())],
        ["export_deliveries", "--since", "2026-11-20", "--out", str(tmp_path), "--no-progress"],
        ["migrate_timeouts", "--to", "v3", "--dry-run"],
        ["rotate_secrets_key"],
    )
    for result in results:
        assert result.returncode == 1, result
        assert "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip() == f"CommandError: {NOT_MIGRATED}", result.args


def test_an_unreachable_database_is_one_line_naming_it(tmp_path):
    (result,) = run_all("postgres://postgres@127.0.0.1:1/nowhere", ["provision_delays"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("CommandError: cannot use the database nowhere on 127.0.0.1:1: "), line


def test_every_command_that_may_touch_the_database_derives_from_the_base():
    names = [m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")]
    assert len(names) >= 9
    for name in set(names) - WITHOUT_DATABASE:
        command = importlib.import_module(f"{commands.__name__}.{name}").Command
        assert issubclass(command, PlatformCommand), f"{name} does not derive from PlatformCommand"


@pytest.mark.django_db
def test_a_command_that_moves_many_rows_records_its_run_without_a_broker_password(capsys, monkeypatch):
    from django.core.management import call_command

    from scheduling.audit import actions
    from scheduling.models import AuditEvent

    # a command audits its runs under its declared action (audit/actions.py): this one's, for the test
    monkeypatch.setitem(actions.COMMAND_RUN, "test_base", "command.test_base")

    class Move(PlatformCommand):
        audit_runs = True

        def add_arguments(self, parser):
            parser.add_argument("--to-broker")
            parser.add_argument("--dry-run", action="store_true")

        def handle(self, *args, **options):
            pass

    call_command(Move(), "--to-broker", "amqp://ops:s3cret@green:5672/", "--dry-run")
    assert not AuditEvent.objects.exists()  # a dry run changes nothing
    call_command(Move(), "--to-broker", "amqp://ops:s3cret@green:5672/")
    (row,) = AuditEvent.objects.all()
    assert row.source == "command" and row.actor.startswith("command ") and row.action == "command.test_base"
    assert row.extra == {"options": {"to_broker": "amqp://ops:<redacted>@green:5672/"}}
    assert "s3cret" not in str(row.extra)

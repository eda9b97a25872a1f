"""The base of the platform's commands: a database that cannot serve them is one line on stderr
and exit 1 (``CommandError``), not a traceback. The common case is a command run before
``migrate`` (e.g. ``provision_delays`` on a fresh install), whose tables do not exist yet."""

import getpass
import os

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, OperationalError, connection

from scheduling.audit import actions
from scheduling.audit.context import AuditContext, audited
from scheduling.core.caller import Caller, caller_for_command
from scheduling.models import Team

# undefined table, undefined column: the migrations are not (all) applied
NOT_MIGRATED_SQLSTATES = frozenset({"42P01", "42703"})
NOT_MIGRATED = "the database is not migrated: run `python manage.py migrate`"


def database_problem(exc: DatabaseError) -> str:
    """What is wrong, in one line (the server's first line; never the password)."""
    if getattr(exc.__cause__, "sqlstate", None) in NOT_MIGRATED_SQLSTATES:
        return NOT_MIGRATED
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    if isinstance(exc, OperationalError):
        db = connection.settings_dict
        where = f"{db.get('NAME')} on {db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}"
        return f"cannot use the database {where}: {first}"
    return f"database error: {first}"


def require_migrated() -> None:
    """For a command that changes something elsewhere (the broker) before it records it here:
    refuse while migrations are pending, rather than do half the work and fail on the record."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    if executor.migration_plan(executor.loader.graph.leaf_nodes()):
        raise CommandError(NOT_MIGRATED)


class PlatformCommand(BaseCommand):
    """Every command of the platform that may touch the database derives from this. What it
    changes is audited as the command's (and the account it runs under): by the services it
    calls, and, for a command that moves or rewrites many rows at once (``audit_runs``), one row
    for the run with its options."""

    audit_runs = False

    def execute(self, *args, **options):
        try:
            with audited(AuditContext(source="command", caller=command_caller(self))):
                output = super().execute(*args, **options)
                if self.audit_runs and not options.get("dry_run"):
                    self.audit_run(options)
                return output
        except DatabaseError as exc:
            raise CommandError(database_problem(exc)) from exc

    def audit_run(self, options: dict) -> None:
        from scheduling.audit.services import audit_record

        name = type(self).__module__.rsplit(".", 1)[-1]
        given = {k: _without_password(v) for k, v in options.items() if k not in _DJANGO_OPTIONS and v not in
                 (None, False, [], "")}
        audit_record(action=actions.COMMAND_RUN[name], object_type="command", object_repr=name,
                     extra={"options": given})


_DJANGO_OPTIONS = frozenset({"verbosity", "settings", "pythonpath", "traceback", "no_color", "force_color",
                             "skip_checks", "stdout", "stderr"})


def _without_password(value):
    """A broker URL's password never goes into the audit log."""
    if isinstance(value, str) and "://" in value and "@" in value:
        scheme, _, rest = value.partition("://")
        userinfo, _, host = rest.rpartition("@")
        return f"{scheme}://{userinfo.split(':', 1)[0]}:<redacted>@{host}"
    return value if isinstance(value, (str, int, float, bool)) else str(value)


def command_caller(command: BaseCommand) -> Caller:
    """A command run on the host is an operator: ``command <name> (<os user>)``."""
    name = type(command).__module__.rsplit(".", 1)[-1]
    try:
        account = getpass.getuser()
    except Exception:  # no name for this uid (a container's)
        account = f"uid {os.getuid()}"
    return caller_for_command(f"{name} ({account})")


def command_team(name: str | None) -> Team | None:
    """The team ``--team`` names (None when not given); CommandError if there is none."""
    if not name:
        return None
    team = Team.objects.filter(name=name).first()
    if team is None:
        raise CommandError(f"no team {name!r} (python manage.py create_team {name})")
    return team

"""``manage.py migrate``: Django's, waiting at most DELAY_MIGRATION_LOCK_TIMEOUT_MS for each lock.

A migration that needs an ACCESS EXCLUSIVE lock for a moment (ADD COLUMN, say) queues behind any
transaction that holds the table, and every query that comes after it queues behind the migration:
one long report transaction on the messages table would stall every request and delivery for as
long as it runs. Under PostgreSQL's ``lock_timeout`` the migration gives up instead, with one line
that names it; an atomic migration is rolled back whole, and ``migrate`` again later picks up where
it stopped (docs/operations/upgrades.md#the-lock-timeout)."""

from django.core.management.base import CommandError
from django.core.management.commands.migrate import Command as DjangoMigrate
from django.db import DatabaseError, OperationalError, connections

from scheduling.config.conf import conf, setting_name
from scheduling.management.commands._base import PlatformCommand

LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for "canceling statement due to lock timeout"


class Command(PlatformCommand, DjangoMigrate):
    """Django's migrate as a platform command: a database that cannot serve it is one line, exit 1."""

    help = DjangoMigrate.help + f" Each lock is waited for at most {setting_name('migration_lock_timeout_ms')}."

    def handle(self, *args, **options):
        timeout_ms = conf().migration_lock_timeout_ms
        connection = connections[options["database"]]
        timed = bool(timeout_ms) and connection.vendor == "postgresql"
        self.applying = None
        before = self._lock_timeout(connection, f"{timeout_ms}ms") if timed else None
        try:
            return super().handle(*args, **options)
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            raise CommandError(
                f"{self.applying or 'a migration'} waited {timeout_ms} ms for a lock and gave up: a transaction "
                f"holds a table it changes (see pg_stat_activity), and waiting longer would hold up every query "
                f"behind it; an atomic migration is rolled back whole: migrate again once that transaction "
                f"ends, or raise {setting_name('migration_lock_timeout_ms')}") from None
        finally:
            if before is not None:  # the connection may serve on (call_command, tests)
                try:
                    self._lock_timeout(connection, before)
                except DatabaseError:  # a connection that broke: nothing to put it back on
                    pass

    def migration_progress_callback(self, action, migration=None, fake=False):
        if action in ("apply_start", "unapply_start"):
            self.applying = f"migration {migration.app_label}.{migration.name}"
        super().migration_progress_callback(action, migration, fake)

    @staticmethod
    def _lock_timeout(connection, value: str) -> str:
        """Set for the session (each migration runs in a transaction of its own): the value before."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, false)", [value])
            return cursor.fetchone()[0]

"""The messages table is vacuumed for its churn (migration 0015): every message leaves three dead
row versions (two updates and, after its retention, the delete), and PostgreSQL's defaults would
let a fifth of a table of hundreds of millions of rows go dead before vacuuming it."""

import importlib

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_the_messages_table_has_the_autovacuum_settings_of_migration_0015():
    settings = importlib.import_module("scheduling.migrations.0015_autovacuum_for_churn").SETTINGS
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'scheduling_scheduledmessage'")
        (options,) = cursor.fetchone()
    assert dict(option.split("=") for option in options) == settings


@pytest.fixture
def autovacuum_off_for_the_table():
    """As a server with autovacuum off would leave it (this reloption works whatever the server's
    setting, so the test means the same on every machine)."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE scheduling_scheduledmessage SET (autovacuum_enabled = false)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE scheduling_scheduledmessage RESET (autovacuum_enabled)")


def test_migrate_warns_when_autovacuum_is_off(autovacuum_off_for_the_table):
    from scheduling.retention.checks import autovacuum_on

    (warning,) = autovacuum_on(databases=["default"])
    assert warning.id == "scheduling.W001" and "autovacuum is off" in warning.msg


def test_the_check_agrees_with_the_server_where_the_table_is_left_to_it():
    from scheduling.retention.checks import autovacuum_on
    from scheduling.retention.selectors import message_table_is_autovacuumed

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('autovacuum') = 'on'")
        (server_on,) = cursor.fetchone()
    assert message_table_is_autovacuumed() is server_on
    assert bool(autovacuum_on(databases=["default"])) is not server_on


@pytest.mark.django_db(transaction=True)
def test_without_autovacuum_the_prune_vacuums_the_table(autovacuum_off_for_the_table, versions, settings, tmp_path):
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.models import Endpoint, ScheduledMessage
    from scheduling.retention.services import message_prune

    settings.ACCURACY_REPORT_DIR = tmp_path
    endpoint = Endpoint.objects.create(name="vacuumed", queue="vacuumed", topology=versions["v3"])
    old = timezone.now() - timedelta(days=30)
    ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, payload={}, status="delivered",
                                    created_at=old, due_at=old, finished_at=old, requested_delay_ms=0)

    def vacuums():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
            cursor.execute("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'scheduling_scheduledmessage'")
            return cursor.fetchone()[0]

    before = vacuums()
    result = message_prune()
    assert result.deleted == 1 and result.vacuumed and vacuums() == before + 1

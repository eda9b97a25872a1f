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

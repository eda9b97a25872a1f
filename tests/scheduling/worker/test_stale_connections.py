"""A pool process must not keep a dead database connection from one task to the next: Django's
close() leaves one alone once it was closed inside a transaction (scheduling/worker/stale_connections.py)."""

import psycopg
import pytest
from celery import signals
from django.conf import settings
from django.db import OperationalError, connections

from scheduling.celery.tasks import sweep_pending

pytestmark = pytest.mark.django_db(transaction=True)


def dead_connection():
    """The default connection, its backend terminated and noticed by psycopg, in the state
    Django leaves after close() inside an atomic block that lost its database."""
    conn = connections["default"]
    conn.ensure_connection()
    pid = conn.connection.info.backend_pid
    db = settings.DATABASES["default"]
    with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"],
                         password=db["PASSWORD"], autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    with pytest.raises(psycopg.OperationalError):
        conn.connection.execute("SELECT 1")
    conn.in_atomic_block = True
    conn.close()  # inside a transaction, Django only marks it
    conn.in_atomic_block = False
    assert conn.closed_in_transaction and conn.connection.closed
    conn.close()
    assert conn.connection is not None, "Django's close() now drops it: this module may be unnecessary"
    return conn


def test_a_dead_connection_is_dropped_before_the_next_task(caplog):
    conn = dead_connection()
    with pytest.raises(OperationalError, match="closed"):
        conn.cursor()  # what every task met until the reset
    signals.task_prerun.send(sender=sweep_pending, task_id="t", task=None)
    assert conn.connection is None and not conn.closed_in_transaction
    with conn.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
    assert "dropping a stale database connection" in caplog.text


def test_a_live_connection_inside_a_transaction_is_kept():
    """A task run in-process within its caller's transaction (a test, a shell) keeps it."""
    from django.db import transaction

    conn = connections["default"]
    with transaction.atomic():
        raw = conn.connection
        signals.task_prerun.send(sender=sweep_pending, task_id="t", task=None)
        assert conn.connection is raw and conn.in_atomic_block


def test_an_eager_task_keeps_its_callers_connection():
    conn = connections["default"]
    conn.ensure_connection()
    raw = conn.connection
    task = sweep_pending
    task.push_request(is_eager=True)
    try:
        signals.task_prerun.send(sender=task, task_id="t", task=None)
    finally:
        task.pop_request()
    assert conn.connection is raw

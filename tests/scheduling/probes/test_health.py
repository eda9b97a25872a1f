"""The readiness parts and how each failure is named, against the real PostgreSQL and RabbitMQ:
a closed port for the database, a vhost that does not exist or holds no cascade for the broker,
a socket that accepts and never answers for the deadline."""

import socket
import time

import pytest
from django.db import connections

from harness.ports import free_port
from scheduling.probes import health

pytestmark = pytest.mark.django_db(transaction=True)  # the check runs in its own thread and connection


def test_all_parts_ok(platform):
    result = health.check_now()
    assert result.ok and result.checks == {"database": "ok", "broker": "ok", "cascade": "ok"}


def test_database_on_a_closed_port_is_named(platform, monkeypatch):
    # the check's thread opens a new connection from these settings (the test's own stays open)
    monkeypatch.setitem(connections.settings["default"], "PORT", free_port())
    result = health.check_now()
    assert set(result.failed) == {"database"}
    assert result.failed["database"] == "unavailable (OperationalError)"
    assert result.checks["broker"] == "ok"
    assert result.checks["cascade"] == "not checked (needs the database)"


def under_prefix(row, prefix):
    """The default version's row moved to a prefix of the test's own (as for a cascade shared
    with another system): what the check looks for is then only what the test declared."""
    row.prefix = prefix
    row.save(update_fields=["prefix"])


def test_a_cascade_not_on_the_broker_is_named(platform, unique_prefix):
    under_prefix(platform["v3"], unique_prefix)
    result = health.check_now()
    assert set(result.failed) == {"cascade"}
    assert result.failed["cascade"].startswith(f"v3 is incomplete on the broker (missing {unique_prefix}delay-unroutable, ")
    assert result.failed["cascade"].endswith("run manage.py provision_delays --version v3")


def test_a_cascade_missing_one_level_is_named(platform, declared, amqp, unique_prefix):
    """Everything declared but one level queue: the names checked are the whole cascade."""
    from topology import cascade

    declared(cascade.V3)
    amqp.delete_queue(cascade.level_name(unique_prefix, 17))
    under_prefix(platform["v3"], unique_prefix)
    result = health.check_now()
    assert result.failed == {"cascade": f"v3 is incomplete on the broker (missing {unique_prefix}delay-level-17): "
                                        "run manage.py provision_delays --version v3"}
    amqp.declare_queue(cascade.level_queue(cascade.V3.with_(prefix=unique_prefix), 17))
    assert health.check_now().ok


def test_a_version_not_recorded_provisioned_is_named(versions, provisioned):
    assert versions["v3"].provisioned_at is None
    result = health.check_now()
    assert result.failed == {"cascade": "v3 is not provisioned: run manage.py provision_delays --version v3"}


def test_default_version_setting_is_followed(platform, settings):
    settings.DELAY_DEFAULT_VERSION = "v2"
    platform["v2"].provisioned_at = None
    platform["v2"].save()
    assert health.check_now().failed == {"cascade": "v2 is not provisioned: run manage.py provision_delays --version v2"}


def test_a_broker_that_never_answers_costs_the_timeout(platform, settings):
    """A socket that accepts connections (the kernel's backlog) and never speaks AMQP."""
    settings.DELAY_READYZ_TIMEOUT_SECONDS = 0.5
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        settings.BROKER_URL = f"amqp://guest:guest@127.0.0.1:{silent.getsockname()[1]}//"
        started = time.monotonic()
        result = health.check_now()
        elapsed = time.monotonic() - started
    assert set(result.failed) == {"broker"}
    assert 0.4 < elapsed < 3.0  # the 0.5 s timeout, not a hang (a bound a busy machine keeps)


def test_answer_is_reused_for_the_cache_time(platform, settings):
    settings.DELAY_READYZ_CACHE_SECONDS = 60
    first = health.readiness()
    assert health.readiness() is first
    settings.DELAY_READYZ_CACHE_SECONDS = 0  # a settings change also forgets the answer
    assert health.readiness() is not first

"""The readiness parts and how each failure is named, against the real PostgreSQL and RabbitMQ:
a closed port for the database, a vhost that does not exist or holds no cascade for the broker,
a socket that accepts and never answers for the deadline."""

import socket
import time
import uuid

import pytest
from django.db import connections

from scheduling import health
from scheduling.conf import broker

pytestmark = pytest.mark.django_db(transaction=True)  # the check runs in its own thread and connection


@pytest.fixture(autouse=True)
def fresh_answer():
    health.forget()
    yield
    health.forget()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def empty_vhost(rabbit_vhost):
    """A vhost of its own on the real broker, with nothing declared in it."""
    vhost = f"dp-test-empty-{uuid.uuid4().hex[:8]}"
    broker().management.create_vhost(vhost)
    yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    broker().management.delete_vhost(vhost)


def test_all_parts_ok(platform):
    result = health.check_now()
    assert result.ok and result.checks == {"database": "ok", "broker": "ok", "cascade": "ok"}


def test_database_on_a_closed_port_is_named(platform, monkeypatch):
    # the check's thread opens a new connection from these settings (the test's own stays open)
    monkeypatch.setitem(connections.settings["default"], "PORT", closed_port())
    result = health.check_now()
    assert set(result.failed) == {"database"}
    assert result.failed["database"] == "unavailable (OperationalError)"
    assert result.checks["broker"] == "ok"
    assert result.checks["cascade"] == "not checked (needs the database)"


def test_a_vhost_without_the_cascade_is_named(platform, settings, empty_vhost):
    settings.BROKER_URL = empty_vhost
    result = health.check_now()
    assert set(result.failed) == {"cascade"}
    assert result.failed["cascade"].startswith("v3 is incomplete on the broker (missing dp.v3.delay-unroutable, ")
    assert result.failed["cascade"].endswith("run manage.py provision_delays --version v3")


def test_a_cascade_missing_one_level_is_named(platform, settings, empty_vhost):
    """Everything declared but one level queue: the names checked are the whole cascade."""
    from topology import cascade

    settings.BROKER_URL = empty_vhost
    version = cascade.get_version("v3")
    with broker().session() as session:
        session.declare(cascade.cascade_plan(version))
        session.delete_queue(cascade.level_name(version.prefix, 17))
    result = health.check_now()
    assert set(result.failed) == {"cascade"}
    assert "(missing dp.v3.delay-level-17)" in result.failed["cascade"]


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
    assert 0.4 < elapsed < 1.5


def test_answer_is_reused_for_the_cache_time(platform, settings):
    settings.DELAY_READYZ_CACHE_SECONDS = 60
    first = health.readiness()
    assert health.readiness() is first
    settings.DELAY_READYZ_CACHE_SECONDS = 0  # a settings change also forgets the answer
    assert health.readiness() is not first

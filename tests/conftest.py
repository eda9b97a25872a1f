"""Shared fixtures: this run's own RabbitMQ vhost (named by settings_test, removed at the end)
and cascades declared under a unique prefix per test, torn down afterwards."""

import importlib
import os
import uuid
from pathlib import Path

import pytest

from harness.vhosts import vhost_own
from scheduling.config.conf import broker
from topology import cascade

_OWN_NODE = None


def pytest_configure(config):
    """A test process of pytest-xdist starts the RabbitMQ node settings_test gave it (its ports in
    BROKER_URL and RABBITMQ_MANAGEMENT_URL); one process alone uses the machine's."""
    global _OWN_NODE
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from urllib.parse import urlsplit

    from django.conf import settings

    from harness.rabbit_node import PrivateRabbit

    _OWN_NODE = PrivateRabbit(port=urlsplit(settings.BROKER_URL).port,
                              management_port=urlsplit(settings.RABBITMQ_MANAGEMENT_URL).port)
    _OWN_NODE.__enter__()


# What a test's folder says of it, so that no module under these folders sets the marker by hand.
# A folder gives a marker only if every one of its modules needs it: tests/e2e/test_spark_standalone.py
# talks to no broker, and tests/rabbit holds pure modules (acks, gather, urls, requirements) besides
# the ones that talk to RabbitMQ, so those modules still say `broker` themselves.
FOLDER_MARKS = {
    "e2e": ("e2e",),
    "reliability": ("reliability",),
    "browser": ("browser", "broker"),
}
TESTS = Path(__file__).parent


def pytest_itemcollected(item):
    """Marks each test by its folder as it is collected: before -m selects and before the sort
    below (a collection_modifyitems hook) reads the markers."""
    folder = item.path.relative_to(TESTS).parts[0]
    for name in FOLDER_MARKS.get(folder, ()):
        item.add_marker(name)


# Modules that start platforms, workers, brokers or browsers of their own (minutes each) go first,
# so that in parallel no process is left running one of them while the others have finished.
# pytest-xdist is run with --no-loadscope-reorder, which keeps this order (it would otherwise put
# the modules with the most tests first, and the three-minute soak, one test, last).
LONG_KINDS = {"reliability", "e2e", "browser"}
# Within each group the longest modules go first (a process takes the next module as it finishes
# one: longest first leaves the short ones to even out the end). Seconds a module took in make
# test (3 processes, 2 cores; 2026-11-28, a machine ~2x slower than the one of 14:12): the order is
# what counts, not the figures. A module not listed takes under ~25 s and keeps its place after
# these; tests/test_layout.py checks that every path names a module.
SECONDS = {
    "e2e/test_moves.py": 350, "e2e/test_accuracy_report.py": 300, "e2e/test_delivery.py": 275,
    "reliability/test_soak.py": 270, "reliability/test_cluster.py": 205,
    "reliability/test_peer_failure_modes.py": 190, "e2e/test_spark_standalone.py": 185,
    "e2e/test_webhook_engine.py": 215, "e2e/test_python_client.py": 175, "e2e/test_events.py": 45, "reliability/test_broker_faults.py": 170,
    "reliability/test_broker_loss.py": 140,
    "reliability/test_fuzz_api.py": 150, "scheduling/reports/test_accuracy.py": 140,
    "e2e/test_celery_integration.py": 135, "e2e/test_flow_control.py": 115,
    "reliability/test_destination_gone.py": 110, "browser/test_admin_browser.py": 110,
    "scheduling/reports/test_export.py": 100, "reliability/test_prune_killed.py": 95, "e2e/test_team_broker.py": 90,
    "topology/test_cascade_live.py": 80, "e2e/test_consumer_timeout.py": 80, "e2e/test_rabbitmq4.py": 75,
    "reliability/test_worker_killed.py": 60, "reliability/test_restore.py": 60, "e2e/test_tracing.py": 60,
    "reliability/test_topology_properties.py": 60,
    "scheduling/moves/test_delays.py": 55, "reliability/test_database_unavailable.py": 55,
    "e2e/test_loop_processes.py": 55, "e2e/test_fanout.py": 90, "e2e/test_envelopes.py": 50, "scheduling/versions/test_shards.py": 45,
    "scheduling/retention/test_services.py": 45, "scheduling/management/test_migrate.py": 45,
    "scheduling/management/test_provision_delays.py": 40,
    "scheduling/config/test_conf.py": 40, "reliability/test_security.py": 35, "e2e/test_relay_gather.py": 35,
    "e2e/test_metrics.py": 35, "e2e/test_migration_teams.py": 30, "topology/test_shards_live.py": 30,
    "scheduling/delivery/test_services.py": 30, "scheduling/api/test_validation.py": 25, "e2e/test_schedules.py": 25,
    "scheduling/management/test_worker_health.py": 25, "e2e/test_notifications.py": 30,
    "test_types.py": 60,
}


def _order(item) -> tuple[bool, int]:
    long = bool(LONG_KINDS & {mark.name for mark in item.iter_markers()})
    return not long, -SECONDS.get(item.path.relative_to(TESTS).as_posix(), 0)


@pytest.hookimpl(trylast=True)  # after any plugin's reordering (a stable sort: its order stays within each group)
def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_order)


def pytest_terminal_summary(terminalreporter):
    """A figure a test records with record_property("summary", ...), shown in every run (the mypy
    baseline's size): pytest-xdist carries it from the test process in the test's report."""
    for report in terminalreporter.getreports("passed") + terminalreporter.getreports("failed"):
        for name, value in getattr(report, "user_properties", ()):
            if name == "summary":
                terminalreporter.write_line(f"{report.nodeid}: {value}")


def pytest_unconfigure(config):
    if _OWN_NODE is not None:
        _OWN_NODE.__exit__(None, None, None)


@pytest.fixture(scope="session")
def rabbit_vhost():
    management, vhost = broker().management, broker().vhost
    assert vhost.startswith("dp-test-"), f"refusing to run broker tests in shared vhost {vhost!r}"
    with vhost_own(management=management, vhost=vhost):
        yield vhost


@pytest.fixture
def amqp(rabbit_vhost):
    """A rabbit.Session on this run's vhost."""
    with broker().session() as session:
        yield session



@pytest.fixture
def unique_prefix():
    return f"t{uuid.uuid4().hex[:8]}."


@pytest.fixture
def declared(amqp, unique_prefix):
    """declared(version, **overrides) declares a cascade under this test's prefix."""
    plans = []

    def declare(version=cascade.V2, **overrides):
        plan = cascade.cascade_plan(version.with_(prefix=overrides.pop("prefix", unique_prefix), **overrides))
        amqp.declare(plan)
        plans.append(plan)
        return plan

    yield declare
    for plan in plans:
        amqp.teardown(plan)


# --- the platform's data and broker state for tests that use the database ----------------------

SEED = [
    *importlib.import_module("scheduling.migrations.0002_seed_topology_versions").SEED,
    importlib.import_module("scheduling.migrations.0008_v3_direct_cascade").V3,
]
VERSION_NAMES = [seed["name"] for seed in SEED]  # v1, v2, v3: what tests parametrise over


@pytest.fixture(scope="session")
def provisioned(rabbit_vhost):
    """The platform's own v1, v2 and v3 cascades, declared once in this run's vhost, with the
    policy provision_delays sets where the broker is 4.x (rabbit/redelivery.py)."""
    from rabbit.redelivery import redelivery_policy_ensure

    with broker().session() as session:
        for name in VERSION_NAMES:
            session.declare(cascade.cascade_plan(cascade.get_version(name)))
            if cascade.get_version(name).envelopes:  # as provision_delays does (versions/services.py)
                session.declare_queue(cascade.fanout_queue())
                session.bind(cascade.fanout_binding(cascade.get_version(name)))
        redelivery_policy_ensure(management=broker().management, vhost=rabbit_vhost, version=session.server_version)
    return rabbit_vhost


@pytest.fixture
def versions():
    """The seeded TopologyVersion rows (a transactional test's flush removes them)."""
    from scheduling.models import TopologyVersion

    def defaults(seed):
        return {k: v for k, v in seed.items() if k != "is_default"}  # a setting since migration 0007

    return {
        seed["name"]: TopologyVersion.objects.get_or_create(name=seed["name"], defaults=defaults(seed))[0]
        for seed in SEED
    }


@pytest.fixture
def platform(versions, provisioned):
    """Versions recorded as provisioned, as after `provision_delays --version all`."""
    from django.utils import timezone

    for version in versions.values():
        version.provisioned_at = timezone.now()
        version.save(update_fields=["provisioned_at"])
    return versions


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("admin", "admin@example.com", "pw")


def _key_client(**key):
    """An API client sending a new key (teams/services.api_key_create's arguments) as a Bearer key."""
    from rest_framework.test import APIClient

    from scheduling.teams.services import api_key_create

    client = APIClient()
    made = api_key_create(**key)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {made.key}")
    client.key = made
    return client


@pytest.fixture
def api(admin_user):
    """An API client authenticated with a superuser's (an operator's) key."""
    return _key_client(user=admin_user)


def team_named(name: str):
    from scheduling.models import Team

    return Team.objects.get_or_create(name=name)[0]


@pytest.fixture
def api_as(django_user_model):
    """api_as(role, team="default") -> a key client for a fresh user with this role in the team
    (viewer, member or admin; None: in no team)."""
    from scheduling.models import Membership

    def make(role=None, team="default"):
        user = django_user_model.objects.create_user(f"u{uuid.uuid4().hex[:8]}", password="pw")
        if role is not None:
            Membership.objects.create(team=team_named(team), user=user, role=role)
        client = _key_client(user=user)
        client.user = user
        return client

    return make


@pytest.fixture
def team_key():
    """team_key(team, *scopes) -> a client with a new key of that team (scopes: "all" by default)."""

    def make(team="default", *scopes):
        return _key_client(team=team_named(team), scopes=scopes or ["all"])

    return make


@pytest.fixture
def endpoint_name():
    return f"ep-{uuid.uuid4().hex[:10]}"


# --- a real Celery worker process (end-to-end and browser tests) ------------------------------


@pytest.fixture(scope="session")
def worker_env(django_db_setup, provisioned):
    from django.conf import settings
    from django.db import connection

    from harness.database import database_url

    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "delayplatform.settings_test",
        "DATABASE_URL": database_url(connection.settings_dict),
        "BROKER_URL": settings.BROKER_URL,
        "DELAY_SWEEP_SECONDS": "1",
        "DELAY_WORKER_METRICS_PORT": "0",  # tests/e2e/test_metrics.py gives its worker a port of its own
        # one loop per worker: the ~60 workers of a run would each start another process;
        # tests/e2e/test_loop_processes.py runs the default's loop processes
        "DELAY_DELIVERY_PROCESSES": "1",
    }


@pytest.fixture(scope="module")
def worker(request, worker_env):
    """A worker (with beat) on this run's vhost and test database for one test module: stopped
    with the module, so its sweeper, timeout manager and unroutable drain never race the tests
    of another module."""
    from harness.celery_worker import Worker
    from harness.paths import ARTIFACTS

    run_id, module = os.environ["DP_TEST_RUN_ID"], request.module.__name__.rsplit(".", 1)[-1]
    w = Worker(f"{module}-{run_id}", worker_env, ARTIFACTS / f"worker-{run_id}-{module}.log").start()
    yield w
    w.stop()


@pytest.fixture(scope="module", autouse=True)
def _worker_leftovers_dropped(django_db_blocker):
    """After a module whose worker processes ran (autouse: torn down after the module's workers
    stopped), what they leave is dropped: copies still in the cascade naming rows the module's
    last flush removed (a rescue's, a duplicate's), which the next module's worker would set aside
    as orphans in the middle of its tests, and the orphan rows a worker wrote after that flush."""
    from django.db import connection

    from harness.celery_worker import WORKER_STARTS

    before = WORKER_STARTS.count
    yield
    if WORKER_STARTS.count == before or not connection.settings_dict["NAME"].startswith("test_dp_"):
        return
    from amqp.exceptions import NotFound

    from scheduling.config.conf import broker
    from scheduling.models import OrphanCopy

    listed = [q["name"] for q in broker().management.queues(broker().vhost)
              if not q.get("exclusive")]  # not another connection's own (a reply queue)
    with broker().session() as session:
        channel = session.conn.channel()  # one channel: a vhost holds every endpoint queue of the run
        for name in listed:
            try:
                channel.queue_purge(name)
            except NotFound:  # gone since the listing (an auto-delete queue): the channel closed
                channel = session.conn.channel()
        channel.close()
    with django_db_blocker.unblock():
        OrphanCopy.objects.all().delete()


@pytest.fixture(scope="session", autouse=True)
def _flush_retries_a_deadlock():
    """A transactional test's teardown TRUNCATEs every table while a live worker of the module may
    still be writing (a retry, the sweeper): PostgreSQL then breaks the deadlock by failing the
    TRUNCATE. The worker's transaction is short, so the flush is simply tried again."""
    import time

    from django.core.management.commands import flush
    from django.db import OperationalError

    handle = flush.Command.handle

    def handle_retrying(self, **options):
        for attempt in range(5):
            try:
                return handle(self, **options)
            except Exception as exc:  # flush wraps the database error in CommandError
                cause = exc.__cause__ or exc
                if attempt == 4 or not (isinstance(cause, OperationalError) and "deadlock" in str(cause)):
                    raise
                time.sleep(0.2)

    flush.Command.handle = handle_retrying
    yield
    flush.Command.handle = handle

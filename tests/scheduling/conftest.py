"""Fixtures of the scheduling app's tests.

Every test module here that uses the database or the broker runs against a RabbitMQ vhost of its
own, so nothing here shares queues with a worker of the e2e tests (or with another module). The
platform's v1, v2 and v3 cascades are declared in it when a test of the module first asks for the
``platform`` (the versions recorded as provisioned, so messages get published): modules that never
do skip the ~2 s of declaring 87 queues, which the vhost lock made every other module wait for.
Rows made directly serve reads (lists, filters, query counts, dashboard figures); the services that
write them are tested on their own and through the admin."""

import hashlib
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

import rabbit
from harness.vhosts import vhost_delete, vhost_lifecycle_lock
from scheduling.models import Endpoint, ScheduledMessage
from topology import cascade


@pytest.fixture(scope="module")
def module_broker_url(request, rabbit_vhost):
    from scheduling.config.conf import broker

    shared = broker()
    vhost = f"{rabbit_vhost}-{hashlib.sha1(request.module.__name__.encode()).hexdigest()[:8]}"
    url = f"{shared.url.rsplit('/', 1)[0]}/{vhost}"
    with vhost_lifecycle_lock():  # one module at a time (harness/vhosts.py)
        shared.management.create_vhost(vhost)
    yield url
    vhost_delete(management=shared.management, vhost=vhost)


@pytest.fixture(scope="module")
def module_cascades(module_broker_url):
    """The platform's cascades in the module's vhost, declared once, on first need."""
    with vhost_lifecycle_lock(), rabbit.Broker(module_broker_url).session() as session:
        for version in cascade.VERSIONS.values():
            session.declare(cascade.cascade_plan(version))
            if version.envelopes:  # the fan-out queue, as provision_delays declares it (versions/services.py)
                session.declare_queue(cascade.fanout_queue())
                session.bind(cascade.fanout_binding(version))
    return module_broker_url


@pytest.fixture
def platform(platform, module_broker, request):
    """The versions recorded as provisioned, as the parent fixture makes them, and declared in the
    module's vhost too where the test's broker is the module's."""
    if module_broker is not None:
        request.getfixturevalue("module_cascades")
    return platform


@pytest.fixture(autouse=True)
def publish_unpaused():
    """Each test starts with the relay's publish pause released: a refusal one test provokes holds
    publishing back for a sweep period in this process, and the next test (whatever runs next in this
    worker) would find its new rows left pending for the sweeper."""
    from scheduling.messages.relay import publish_pause

    publish_pause.until = 0.0


@pytest.fixture(autouse=True)
def module_broker(request):
    """The platform's broker, for a test that uses the database or the broker, is the module's
    own vhost (pure tests need neither)."""
    if not (request.node.get_closest_marker("django_db") or request.node.get_closest_marker("broker")):
        return None
    url = request.getfixturevalue("module_broker_url")
    request.getfixturevalue("settings").BROKER_URL = url
    return url


@pytest.fixture
def bound_endpoint(platform, endpoint_name, amqp):
    """bound_endpoint("v3") -> an Endpoint row on that version whose queue is declared and bound on
    the broker (removed after the test)."""
    from harness.endpoints import bind_endpoint

    made = []

    def make(version: str = "v2") -> Endpoint:
        bind_endpoint(amqp, cascade.get_version(version), endpoint_name)
        made.append(endpoint_name)
        return Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=platform[version])

    yield make
    for name in made:
        amqp.delete_queue(name)


@pytest.fixture
def endpoint_of(versions, endpoint_name):
    """endpoint_of("v3", **fields) -> an Endpoint row named endpoint_name on that version (v2 by
    default), without a queue on the broker: enough for services and pages that only use rows. A
    module's `endpoint` fixture says which one it wants; bound_endpoint declares the queue too."""

    def make(version: str = "v2", **fields) -> Endpoint:
        return Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions[version], **fields)

    return make


@pytest.fixture
def endpoint_row(endpoint_of):
    """An endpoint row on v2 without a queue on the broker: enough for pages that only read rows."""
    return endpoint_of()


@pytest.fixture
def make_rows(endpoint_row):
    """make_rows(n, **fields) -> n message rows on endpoint_row (or fields["endpoint"])."""

    def make(n=1, **fields):
        now = timezone.now()
        endpoint = fields.pop("endpoint", endpoint_row)
        defaults = {"payload": {"n": 0}, "due_at": now + timedelta(hours=1), "requested_delay_ms": 3_600_000}
        rows = [
            ScheduledMessage(endpoint=endpoint, topology=endpoint.topology, **{**defaults, "payload": {"n": i}, **fields})
            for i in range(n)
        ]
        return ScheduledMessage.objects.bulk_create(rows)

    return make


@pytest.fixture
def two_transactions():
    """two_transactions(first, second, waiting=...) -> {"first" or "second": the error it raised}.
    Each runs in a transaction on a connection of its own: the second once the first has written,
    the first committing only when the second has ended or ``waiting()`` sees it wait on a lock.
    What a lock that serialises two writers does, shown; without it neither sees the other."""

    def run(first, second, *, waiting) -> dict[str, Exception]:
        first_written, second_done = threading.Event(), threading.Event()
        raised: dict[str, Exception] = {}

        def in_first():
            try:
                with transaction.atomic():
                    first()
                    first_written.set()
                    deadline = time.monotonic() + 60
                    while not second_done.is_set() and not waiting() and time.monotonic() < deadline:
                        time.sleep(0.05)
            except Exception as exc:  # noqa: BLE001 (the caller asserts on it)
                raised["first"] = exc
            finally:
                connection.close()

        def in_second():
            try:
                first_written.wait(60)
                with transaction.atomic():
                    second()
            except Exception as exc:  # noqa: BLE001
                raised["second"] = exc
            finally:
                second_done.set()
                connection.close()

        threads = [threading.Thread(target=in_first), threading.Thread(target=in_second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        return raised

    return run

"""The platform on RabbitMQ 4.0.5 (Debian 13's package in a chroot beside the machine's 3.10.8,
scripts/rabbitmq4.sh): every version's cascade provisioned and verified as planned, one message
per version delivered by a real worker, the messages waiting in the cascades when the broker
stops delivered once, none early, after it starts again, and a handler whose task is handed back
to its quorum queue 25 times still run to the end (4.0's default delivery limit is 20); a team's
broker user (team_broker_user) runs its outside worker's delayed task and is refused the rest.
`make test-rabbitmq4` runs the broker's whole suite on 4.0.5; this is the part `make test` runs."""

import io
import uuid

import pytest
from django.core.management import call_command

from harness.celery_worker import Worker
from harness.paths import ARTIFACTS
from harness.rabbit_node import PrivateRabbit
from harness.vhosts import vhost_own
from harness.waiting import wait_until
from rabbit import Management
from scheduling.endpoints.services import endpoint_create
from scheduling.messages.services import message_schedule
from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
VERSIONS = ("v1", "v2", "v3")
# A 4.0.5 node in its chroot, sharing a busy 2-core machine with make test, has let an AMQP handshake
# run past the platform's 5 s (DELAY_BROKER_CONNECT_TIMEOUT_MS) twice in CI, once mid-module after
# a restart; the tests here are about what 4.0.5 does, not how fast it answers, so theirs is 30 s.
CONNECT_TIMEOUT_MS = 30000


@pytest.fixture(scope="module")
def rabbit4():
    """A 4.0.5 node of this module's own (its port apart from every test process's node)."""
    import os

    port = 5691 + 2 * int(os.environ.get("PYTEST_XDIST_WORKER", "gw9").removeprefix("gw"))
    with PrivateRabbit(port=port, management_port=port + 10000, series=4) as node:
        yield node


@pytest.fixture
def on_rabbit4(rabbit4, settings, platform, worker_env):
    """The platform's settings pointed at the 4.0.5 node, its cascades provisioned, and a worker
    (with beat) on it."""
    settings.BROKER_URL = f"amqp://guest:guest@127.0.0.1:{rabbit4.port}/"
    settings.RABBITMQ_MANAGEMENT_URL = rabbit4.management_url
    settings.DELAY_BROKER_CONNECT_TIMEOUT_MS = CONNECT_TIMEOUT_MS
    env = {**worker_env, "BROKER_URL": settings.BROKER_URL, "RABBITMQ_MANAGEMENT_URL": rabbit4.management_url,
           "DELAY_BROKER_CONNECT_TIMEOUT_MS": str(CONNECT_TIMEOUT_MS)}
    for version in VERSIONS:
        call_command("provision_delays", "--version", version, stdout=io.StringIO())
    worker = Worker(f"rabbit4-{uuid.uuid4().hex[:6]}", env, ARTIFACTS / "worker-rabbit4.log").start()
    yield rabbit4
    worker.stop()


def delivered(ids):
    def check():
        rows = list(ScheduledMessage.objects.filter(id__in=ids, status=ScheduledMessage.Status.DELIVERED))
        return rows if len(rows) == len(ids) else None

    return check


def test_every_version_verifies_as_planned_on_4_0_5(on_rabbit4):
    out = io.StringIO()
    for version in VERSIONS:
        call_command("provision_delays", "--version", version, "--verify", stdout=out)
    text = out.getvalue()
    assert all(f"{version} (" in text for version in VERSIONS)
    assert text.count("cascade complete and as planned") == 3, text  # v1: its classic queues' listed type too


def receipts(ids) -> dict[str, int]:
    """Handler runs per message (testapp.record_receipt records one per run, duplicates included)."""
    from harness.testapp.models import Receipt

    return {i: n for i, n in ((str(i), Receipt.objects.filter(message_id=str(i)).count()) for i in ids)}


def test_one_message_per_version_is_delivered_then_the_waiting_ones_survive_a_restart(on_rabbit4):
    endpoints = {version: endpoint_create(name=f"r4-{version}-{uuid.uuid4().hex[:6]}", topology=version,
                                          handler="celery_task", handler_target="testapp.record_receipt")
                 for version in VERSIONS}
    first = [message_schedule(endpoint=e, payload={"v": v}, delay=1.5).id for v, e in endpoints.items()]
    rows = wait_until(delivered(first), 30, 0.2, "a message on each version delivered")
    assert all(r.delivered_at >= r.due_at for r in rows)
    wait_until(lambda: set(receipts(first).values()) == {1}, 15, 0.2, "each handler run")

    waiting = [message_schedule(endpoint=e, payload={"v": v, "n": n}, delay=6 + n).id
               for v, e in endpoints.items() for n in range(3)]
    wait_until(lambda: ScheduledMessage.objects.filter(id__in=waiting, status="published").count() == len(waiting), 10,
               0.2, "all published into the cascades")
    on_rabbit4.stop()  # a clean stop: quorum and classic queues keep what they hold
    on_rabbit4.restart()
    rows = wait_until(delivered(waiting), 60, 0.5, "the waiting messages delivered after the restart")
    assert all(r.delivered_at >= r.due_at for r in rows)  # none early, none lost
    # each handler once (a copy the rescue sent while the broker was away is a suppressed duplicate)
    wait_until(lambda: set(receipts(waiting).values()) == {1}, 20, 0.2, "each handler run once")


def test_a_team_s_broker_user_runs_its_worker_and_reaches_nothing_else_on_4_0_5(on_rabbit4, live_server, settings,
                                                                              tmp_path):
    """tests/e2e/test_team_broker.py's outside worker and refusals, on 4.0.5 (its permission
    checks, topic exchanges and default exchange are the ones a 4.x deployment has)."""
    from scheduling.teams.services import team_create
    from tests.e2e.team_broker import outside_worker_runs_and_is_refused

    settings.DELAY_CELERY_TASK_ALLOWLIST = ["testapp.*", "extapp.tasks.*"]
    own = team_create(name=f"ext4-{uuid.uuid4().hex[:6]}", celery_task_allowlist="extapp.tasks.*")
    other = team_create(name=f"oth4-{uuid.uuid4().hex[:6]}")
    mine = endpoint_create(team=own, name="tasks", topology="v3", handler="celery_queue")
    theirs = endpoint_create(team=other, name="billing", topology="v3")
    answers = outside_worker_runs_and_is_refused(team=own, own_queue=mine.queue, other_queue=theirs.queue,
                                                 platform_url=live_server.url, folder=tmp_path)
    assert answers == {what: "403 AccessRefused" for what in answers} and len(answers) == 12, answers


@pytest.fixture
def quorum_on_rabbit4(rabbit4, settings, platform, worker_env):
    """A vhost of its own on the 4.0.5 node with every queue a quorum queue (DELAY_QUEUE_TYPE, as
    on a cluster), every version provisioned, and a worker on it."""
    vhost = f"dp-test-quorum-{uuid.uuid4().hex[:6]}"
    with vhost_own(management=Management(rabbit4.management_url), vhost=vhost):
        settings.BROKER_URL = f"amqp://guest:guest@127.0.0.1:{rabbit4.port}/{vhost}"
        settings.RABBITMQ_MANAGEMENT_URL = rabbit4.management_url
        settings.DELAY_QUEUE_TYPE = "quorum"
        settings.DELAY_BROKER_CONNECT_TIMEOUT_MS = CONNECT_TIMEOUT_MS
        call_command("provision_delays", "--version", "all", stdout=io.StringIO())
        env = {**worker_env, "BROKER_URL": settings.BROKER_URL, "RABBITMQ_MANAGEMENT_URL": rabbit4.management_url,
               "DELAY_QUEUE_TYPE": "quorum", "DELAY_BROKER_CONNECT_TIMEOUT_MS": str(CONNECT_TIMEOUT_MS)}
        worker = Worker(f"rabbit4-q-{uuid.uuid4().hex[:6]}", env, ARTIFACTS / "worker-rabbit4-quorum.log").start()
        try:
            yield vhost
        finally:
            worker.stop()


REFUSED = 25  # more than 4.0's default delivery limit (20)


def test_a_task_handed_back_25_times_to_its_quorum_queue_is_not_dropped(quorum_on_rabbit4):
    """Without the platform's policy (rabbit/redelivery.py) 4.0.5 drops the task at its 21st
    delivery: the handler's runs stop at 21 and the message is gone."""
    from harness.testapp.models import Receipt

    endpoint = endpoint_create(name=f"r4-refused-{uuid.uuid4().hex[:6]}", topology="v3", handler="celery_task",
                               handler_target="testapp.refuse_then_record")
    message = message_schedule(endpoint=endpoint, payload={"refuse": REFUSED}, delay=1)
    wait_until(delivered([message.id]), 30, 0.2, "the message delivered (its handler task published)")

    def runs():
        return Receipt.objects.filter(message_id__startswith=f"{message.id}#").count()

    try:
        wait_until(lambda: runs() == REFUSED + 1, 60, 0.25, f"{REFUSED} refused runs and the one that succeeds")
    except AssertionError:  # 4.0.5 without the policy: 21
        raise AssertionError(f"the handler ran {runs()} times, not {REFUSED + 1}: its task was dropped") from None
    out = io.StringIO()
    call_command("provision_delays", "--version", "v3", "--verify", stdout=out)
    assert "ok: quorum queues keep a message handed back 20 times: policy dp-unlimited-redelivery" in out.getvalue()
    import time

    time.sleep(2)  # a run after the one that succeeded would be a 27th receipt
    assert runs() == REFUSED + 1

"""A team's own broker user (``manage.py team_broker_user``) on the real broker: an outside app's
Celery worker (the Python client's tests/extapp, ``PlatformTask``, Celery's default node name, on
the same host as a platform worker that has the default node name too) connects with its URL and
runs its delayed tasks and answers remote control; the same URL is refused (403 ACCESS_REFUSED)
consuming, purging, publishing to or deleting another team's queue and a cascade level, and
publishing into the cascade's exchanges. A copy forged into an endpoint's queue naming another
endpoint's row is dropped by the delivery loop, not delivered, and counted. On RabbitMQ 4.0.5:
tests/e2e/test_rabbitmq4.py runs the same checks (tests/e2e/team_broker.py)."""

import io
import time
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from harness.celery_worker import Worker
from harness.paths import ARTIFACTS
from harness.waiting import wait_until
from scheduling.config.conf import broker
from scheduling.endpoints.services import endpoint_create
from scheduling.models import ScheduledMessage
from scheduling.teams.broker_access import user_name
from scheduling.teams.services import team_create
from tests.e2e.team_broker import (
    cascade_targets,
    outcome,
    outside_worker_runs_and_is_refused,
    purge,
    team_broker_url,
)

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status
TASKS = "extapp.tasks.*"


@pytest.fixture(scope="module")
def default_named_worker(worker_env):
    """The platform's worker as a deployment starts it, with Celery's default node name
    (celery@<host>): its remote-control queue is celery@<host>.celery.pidbox, exclusive."""
    env = {**worker_env, "DELAY_CELERY_TASK_ALLOWLIST": f"testapp.*,{TASKS}"}
    worker = Worker("celery", env, ARTIFACTS / f"worker-team-broker-{uuid.uuid4().hex[:6]}.log").start()
    yield worker
    worker.stop()


@pytest.fixture
def teams(platform, settings, amqp):
    settings.DELAY_CELERY_TASK_ALLOWLIST = ["testapp.*", TASKS]
    own = team_create(name=f"ext-{uuid.uuid4().hex[:6]}", celery_task_allowlist=TASKS)
    other = team_create(name=f"oth-{uuid.uuid4().hex[:6]}")
    endpoints = {"own": endpoint_create(team=own, name="tasks", handler="celery_queue"),
                 "other": endpoint_create(team=other, name="billing")}
    yield own, other, endpoints
    for endpoint in endpoints.values():
        amqp.delete_queue(endpoint.queue)


def test_a_team_s_worker_runs_its_delayed_tasks_and_reaches_nothing_else(teams, default_named_worker, live_server,
                                                                       tmp_path):
    own, other, endpoints = teams
    answers = outside_worker_runs_and_is_refused(team=own, own_queue=endpoints["own"].queue,
                                                 other_queue=endpoints["other"].queue, platform_url=live_server.url,
                                                 folder=tmp_path)
    assert answers == {what: "403 AccessRefused" for what in answers}, answers
    assert len(answers) == 12
    # beside it on this host, the platform's worker with the default node name: neither crashed
    assert default_named_worker.process.poll() is None
    assert "RESOURCE_LOCKED" not in default_named_worker.log_text()


def test_without_rotate_an_existing_user_is_refused_and_rotate_gives_a_new_password(teams):
    own, _, _ = teams
    with team_broker_url(own.name) as first:
        with pytest.raises(CommandError, match="has a broker user .* already; .*--rotate"):
            call_command("team_broker_user", own.name, stdout=io.StringIO())
        out = io.StringIO()
        call_command("team_broker_user", own.name, "--rotate", stdout=out)
        second = out.getvalue().splitlines()[-1]
        assert second != first and "rotated" in out.getvalue()
        from scheduling.models import AuditEvent

        events = list(AuditEvent.objects.filter(object_id=str(own.pk), action__startswith="team.broker_user_")
                      .order_by("id").values_list("action", "after"))
        assert [action for action, _ in events] == ["team.broker_user_create", "team.broker_user_rotate"]
        password = second.split(":")[2].split("@")[0]
        assert all(password not in str(after) and "@" not in str(after) for _, after in events)  # never the URL
        level, _ = cascade_targets()
        assert outcome(second, purge(teams[2]["own"].queue)) == "ok"  # the new password works
        with pytest.raises(Exception, match="ACCESS_REFUSED|AccessRefused|403"):
            outcome(first, purge(teams[2]["own"].queue))  # the old one no longer logs in
        assert outcome(second, purge(level)) == "403 AccessRefused"


def test_unknown_team_is_one_line():
    with pytest.raises(CommandError, match=r"^no team 'nobody-here' \(python manage.py create_team nobody-here\)$"):
        call_command("team_broker_user", "nobody-here", stdout=io.StringIO())


def test_verify_reports_a_team_user_wider_than_its_team(teams, versions):
    own, _, _ = teams
    management = broker().management
    with team_broker_url(own.name):
        out, err = io.StringIO(), io.StringIO()
        call_command("provision_delays", "--version", "v3", "--verify", stdout=out, stderr=err)
        assert user_name(own.name) not in err.getvalue()
        management.put_permissions(broker().vhost, user_name(own.name), configure=".*", write=".*", read=".*")
        err = io.StringIO()
        with pytest.raises(CommandError, match="team broker user problem"):
            call_command("provision_delays", "--version", "v3", "--verify", stdout=io.StringIO(), stderr=err)
        lines = [line for line in err.getvalue().splitlines() if user_name(own.name) in line]
        assert len(lines) == 3 and all("'.*'" in line and "--rotate" in line for line in lines), err.getvalue()


def test_a_copy_forged_into_an_endpoint_s_queue_naming_another_endpoint_s_row_is_dropped_and_counted(
        teams, default_named_worker, amqp):
    """The loop reads the row's id from the message: one put in endpoint B's queue naming A's due
    row (what a team's user may publish into its own queue) takes nothing, and is not handed back."""
    from datetime import timedelta

    from django.utils import timezone

    from rabbit import Outgoing
    from scheduling.messages import wire

    own, other, endpoints = teams
    victim = endpoints["other"]
    forged_on = endpoint_create(team=own, name="inbox")
    try:
        wait_until(lambda: (broker().management.queue(broker().vhost, forged_on.queue) or {}).get("consumers") == 1,
                   30, 0.2, "the worker to consume the team's queue")
        now = timezone.now()
        row = ScheduledMessage.objects.create(  # due, in flight: its own copy is on its way
            endpoint=victim, topology=victim.topology, payload={"secret": 1}, requested_delay_ms=0,
            due_at=now - timedelta(seconds=1), created_at=now - timedelta(minutes=1), status=Status.PUBLISHED)
        body, headers, properties = wire.deliver_message(str(row.id), now)
        sent = amqp.publish([Outgoing("", forged_on.queue, body, {wire.H_MESSAGE_ID: str(row.id), **headers},
                                      properties)])
        assert sent.confirmed == {0}
        wait_until(lambda: f"arrived on queue {forged_on.queue}" in default_named_worker.log_text(), 30, 0.2,
                   "the loop to drop the forged copy")
        time.sleep(0.5)
        assert ScheduledMessage.objects.get(id=row.id).status == Status.PUBLISHED  # not delivered from B's queue
        assert amqp.queue_depth(forged_on.queue) == 0  # acked: not handed back forever
    finally:
        amqp.delete_queue(forged_on.queue)

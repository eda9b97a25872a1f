"""A broker message names its row by id; delivery takes the row only when the queue the copy came
from is that row's endpoint's queue. A copy naming endpoint A's row that arrives on endpoint B's
queue (a team's broker user can publish into its own queues; teams/broker_access.py) takes
nothing: the row stays in flight, untouched, and the copy comes back MISROUTED, counted
(delay_misrouted_copies) for the queue it came from. Each path: set-based (record-only), one by
one (a handler), and the webhook lease."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from scheduling.delivery.services import Result, delivery_receive_many
from scheduling.delivery.webhook_calls import webhook_call_take
from scheduling.models import Endpoint, ScheduledMessage, Team

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


def endpoint(owner: Team, versions, name: str, **fields) -> Endpoint:
    return Endpoint.objects.create(team=owner, name=name, queue=f"{owner.name}--{name}", topology=versions["v3"],
                                   **fields)


def due_row(target: Endpoint) -> ScheduledMessage:
    now = timezone.now()
    return ScheduledMessage.objects.create(endpoint=target, topology=target.topology, payload={"n": 1},
                                           requested_delay_ms=0, due_at=now - timedelta(seconds=1),
                                           created_at=now - timedelta(hours=1), status=Status.PUBLISHED)


def counted(queue: str) -> float:
    return REGISTRY.get_sample_value("delay_misrouted_copies_total", {"queue": queue}) or 0.0


@pytest.fixture
def teams():
    return [Team.objects.create(name=f"t{n}-{uuid.uuid4().hex[:8]}") for n in (1, 2)]


def untouched(row: ScheduledMessage) -> None:
    now = ScheduledMessage.objects.get(pk=row.pk)
    assert (now.status, now.delivery_count, now.delivered_at, now.call_lease_until) == (Status.PUBLISHED, 0, None, None)


@pytest.mark.parametrize("handler", [{}, {"handler": "celery_task", "handler_target": "testapp.record_receipt"}],
                         ids=["record-only", "handler"])
def test_a_copy_on_another_endpoints_queue_is_not_delivered_and_is_counted(teams, versions, handler,
                                                                         django_capture_on_commit_callbacks):
    victim, other = teams
    a = endpoint(victim, versions, "a", **handler)
    b = endpoint(other, versions, "b")
    row = due_row(a)
    before = counted(b.queue)
    with django_capture_on_commit_callbacks(execute=True):
        (outcome,) = delivery_receive_many(items=[(str(row.id), 0, None, None, b.queue)], by="test")
    assert outcome.result is Result.MISROUTED
    untouched(row)
    assert counted(b.queue) == before + 1
    # the same copy on its own queue is delivered
    with django_capture_on_commit_callbacks(execute=True):
        (outcome,) = delivery_receive_many(items=[(str(row.id), 0, None, None, a.queue)], by="test")
    assert outcome.result is not Result.MISROUTED
    assert ScheduledMessage.objects.get(pk=row.pk).delivery_count == 1
    assert counted(b.queue) == before + 1 and counted(a.queue) == 0


def test_the_same_team_s_other_endpoint_is_another_queue_too(teams, versions, django_capture_on_commit_callbacks):
    owner = teams[0]
    a, b = endpoint(owner, versions, "a"), endpoint(owner, versions, "b")
    row = due_row(a)
    with django_capture_on_commit_callbacks(execute=True):
        (outcome,) = delivery_receive_many(items=[(str(row.id), 0, None, None, b.queue)], by="test")
    assert outcome.result is Result.MISROUTED
    untouched(row)


def test_a_webhook_row_is_not_leased_for_a_copy_on_another_queue(teams, versions):
    victim, other = teams
    hook = endpoint(victim, versions, "hook", handler="webhook", handler_target="https://example.com/hook",
                    webhook_secret="s" * 32)
    b = endpoint(other, versions, "b", handler="webhook", handler_target="https://example.com/b",
                 webhook_secret="s" * 32)
    row = due_row(hook)
    before = counted(b.queue)
    taken, others = webhook_call_take(items=[(str(row.id), 0, None, None, b.queue)], deadlines={str(row.id): 5.0})
    assert taken == {} and others[str(row.id)].result is Result.MISROUTED
    untouched(row)
    assert counted(b.queue) == before + 1
    taken, others = webhook_call_take(items=[(str(row.id), 0, None, None, hook.queue)], deadlines={str(row.id): 5.0})
    assert list(taken) == [str(row.id)] and others == {}

"""What the services count, against the real database (and broker, for the relay): each counter
moves by exactly the events it names, under the team's, endpoint's and version's names, and only
once the transaction commits. Counters are read from this process's registry before and after."""

import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from prometheus_client import REGISTRY

from scheduling.celery.services import celery_task_claim
from scheduling.core.lifecycle import Arrival, Status
from scheduling.delivery.services import Result, delivery_receive_many
from scheduling.messages.relay import relay_publish
from scheduling.messages.services import message_cancel, message_schedule
from scheduling.models import Endpoint, ScheduledMessage, Team
from scheduling.observability import metrics

pytestmark = pytest.mark.django_db


def value(name, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Reading:
    """The named samples now, and later how much each moved."""

    def __init__(self, endpoint, version="v2", team="default"):
        self.labels = {"team": team, "endpoint": endpoint, "version": version}
        self.names = ["delay_deliveries_total", "delay_duplicates_suppressed_total", "delay_cancelled_arrivals_total",
                      "delay_handler_failures_total", "delay_handler_retries_total", "delay_cancellations_total",
                      "delay_scheduled_in_past_total", "delay_delivery_lateness_seconds_count"]
        self.before = {n: value(n, **self.labels) for n in self.names}

    def moved(self) -> dict[str, float]:
        return {n: value(n, **self.labels) - self.before[n] for n in self.names
                if value(n, **self.labels) != self.before[n]}


@pytest.fixture
def endpoint(endpoint_of):
    return endpoint_of("v2")


def row(endpoint, *, due_in=timedelta(0), status=Status.PUBLISHED, late=timedelta(0)):
    now = timezone.now()
    return ScheduledMessage.objects.create(
        endpoint=endpoint, topology=endpoint.topology, payload={}, due_at=now + due_in - late, requested_delay_ms=0,
        status=status, created_at=now - timedelta(hours=1))


def test_a_batch_counts_deliveries_with_lateness_duplicates_and_cancelled_arrivals(
        endpoint, django_capture_on_commit_callbacks):
    first, second = row(endpoint, late=timedelta(seconds=2)), row(endpoint)
    cancelled = row(endpoint, status=Status.CANCELLED)
    reading = Reading(endpoint.name)
    le_1s = value("delay_delivery_lateness_seconds_bucket", team="default", endpoint=endpoint.name, version="v2",
                  le="1.0")
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = delivery_receive_many(items=[(str(first.id), 0), (str(first.id), 0), (str(second.id), 0),
                                          (str(cancelled.id), 0)])
    assert [o.result for o in outcomes] == [Result.DELIVERED, Result.DUPLICATE, Result.DELIVERED, Result.CANCELLED]
    assert reading.moved() == {"delay_deliveries_total": 2, "delay_duplicates_suppressed_total": 1,
                               "delay_cancelled_arrivals_total": 1, "delay_delivery_lateness_seconds_count": 2}
    # one of the two was 2 s late: only the other falls in the 1 s bucket
    assert value("delay_delivery_lateness_seconds_bucket", team="default", endpoint=endpoint.name, version="v2",
                 le="1.0") - le_1s == 1


def test_two_teams_endpoints_of_one_name_are_counted_apart(versions, endpoint_name, django_capture_on_commit_callbacks):
    other = Team.objects.create(name=f"team-{uuid.uuid4().hex[:8]}")
    ours = Endpoint.objects.create(name=endpoint_name, queue=f"default--{endpoint_name}", topology=versions["v2"])
    theirs = Endpoint.objects.create(team=other, name=endpoint_name, queue=f"{other.name}--{endpoint_name}",
                                     topology=versions["v2"])
    rows = [row(ours), row(theirs), row(theirs)]
    readings = Reading(endpoint_name), Reading(endpoint_name, team=other.name)
    with django_capture_on_commit_callbacks(execute=True):
        delivery_receive_many(items=[(str(r.id), 0) for r in rows])
    assert [reading.moved()["delay_deliveries_total"] for reading in readings] == [1, 2]


def test_nothing_is_counted_when_the_transaction_rolls_back(endpoint, django_capture_on_commit_callbacks):
    message = row(endpoint)
    reading = Reading(endpoint.name)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        with transaction.atomic():
            delivery_receive_many(items=[(str(message.id), 0)])
            raise RuntimeError("rolled back")
    assert reading.moved() == {}


@pytest.mark.parametrize("max_retries, moved", [
    (5, {"delay_handler_failures_total": 1, "delay_handler_retries_total": 1}),
    (0, {"delay_handler_failures_total": 1}),  # gave up: a failure without a retry
])
def test_a_failing_handler_counts_a_failure_and_a_retry_unless_it_gives_up(
        versions, endpoint_name, settings, django_capture_on_commit_callbacks, max_retries, moved):
    settings.DELAY_HANDLER_MAX_RETRIES = max_retries
    hook = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v2"], handler=Endpoint.Handler.WEBHOOK,
                                   handler_target="http://127.0.0.1:1/refused", webhook_secret="s" * 32)
    message = row(hook)
    reading = Reading(endpoint_name)
    with django_capture_on_commit_callbacks(execute=True):
        (outcome,) = delivery_receive_many(items=[(str(message.id), 0)], defer_webhooks=False)
    assert outcome.result in (Result.RETRY, Result.FAILED)
    assert reading.moved() == {"delay_deliveries_total": 1, "delay_delivery_lateness_seconds_count": 1, **moved}


def test_a_claimed_celery_task_counts_as_a_delivery_and_a_second_claim_as_a_duplicate(
        versions, endpoint_name, django_capture_on_commit_callbacks):
    queue = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"], handler=Endpoint.Handler.CELERY_QUEUE)
    task = row(queue)
    reading = Reading(endpoint_name, "v3")
    with django_capture_on_commit_callbacks(execute=True):
        assert celery_task_claim(message_id=str(task.id), redelivered=False) is True
        assert celery_task_claim(message_id=str(task.id), redelivered=False) is False
    assert reading.moved() == {"delay_deliveries_total": 1, "delay_duplicates_suppressed_total": 1,
                               "delay_delivery_lateness_seconds_count": 1}


def test_cancelling_counts_once(endpoint, django_capture_on_commit_callbacks):
    message = row(endpoint, due_in=timedelta(hours=1), status=Status.PENDING)
    reading = Reading(endpoint.name)
    with django_capture_on_commit_callbacks(execute=True):
        message_cancel(message_id=message.id)
        message_cancel(message_id=message.id)  # already cancelled: nothing changes, nothing counted
    assert reading.moved() == {"delay_cancellations_total": 1}


@pytest.mark.broker
def test_scheduling_in_the_past_is_counted_and_a_future_time_is_not(platform, endpoint_name,
                                                                     django_capture_on_commit_callbacks):
    Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=platform["v2"])
    reading = Reading(endpoint_name)
    with django_capture_on_commit_callbacks(execute=True):
        message_schedule(endpoint=endpoint_name, payload={}, deliver_at=timezone.now() - timedelta(minutes=5))
        message_schedule(endpoint=endpoint_name, payload={}, deliver_at=timezone.now() + timedelta(minutes=5))
        message_schedule(endpoint=endpoint_name, payload={}, delay=0)  # due when accepted: not in the past
    assert reading.moved() == {"delay_scheduled_in_past_total": 1}


@pytest.mark.broker
def test_the_relay_counts_publishes_and_failures_by_version(platform, endpoint_name, settings):
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=platform["v3"])
    rows = [row(endpoint, due_in=timedelta(hours=1), status=Status.PENDING) for _ in range(3)]
    published, failed = value("delay_relay_published_total", version="v3"), value("delay_relay_failures_total",
                                                                                 version="v3")
    assert relay_publish(ids=[str(r.id) for r in rows[:2]]).published == 2
    settings.BROKER_URL = "amqp://guest:guest@127.0.0.1:1//"  # refuses connections
    assert relay_publish(ids=[str(rows[2].id)]).failed == 1
    assert value("delay_relay_published_total", version="v3") - published == 2
    assert value("delay_relay_failures_total", version="v3") - failed == 1


def test_early_counts_as_on_time_and_unknown_ids_stand_in_for_names():
    """Never early by design; if clocks ever made one, it must not pull the histogram's sum down."""

    class Row:
        endpoint_id, topology_id = 10**12 + int(uuid.uuid4().int % 1000), 10**12

    metrics.record([metrics.Counted(metrics.DELIVERIES, Row, lateness_ms=-5)])
    labels = {"team": "", "endpoint": str(Row.endpoint_id), "version": str(Row.topology_id)}
    assert value("delay_deliveries_total", **labels) == 1
    assert value("delay_delivery_lateness_seconds_sum", **labels) == 0
    assert value("delay_delivery_lateness_seconds_bucket", le="0.001", **labels) == 1


def test_a_retry_attempt_arriving_is_not_a_second_delivery():
    assert metrics.arrival(Arrival.DELIVER, object(), {"status": "delivered"}) is None
    assert metrics.arrival(Arrival.DELIVER, object(), {"delivered_at": 1, "lateness_ms": 3}).lateness_ms == 3
    assert metrics.arrival(Arrival.CANCELLED, object(), {}).metric is metrics.CANCELLED_ARRIVALS

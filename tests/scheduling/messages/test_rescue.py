"""The safety net against the live broker: an overdue first delivery whose row still says
``published`` gets a copy through its version's delivery exchange; nothing else does. A Celery
queue's overdue task gets one too, from any worker's look, and then its next only once it has
waited as long again as it was late (its workers may be down: not a copy every look)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.config.conf import broker
from scheduling.core.clock import to_epoch_ms
from scheduling.messages import wire
from scheduling.messages.rescue import message_rescue_overdue, message_rescue_overdue_tasks
from scheduling.models import Endpoint, EndpointKeyFlow, ScheduledMessage
from tests.topology.helpers import get, wait_get
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
Status = ScheduledMessage.Status


@pytest.fixture
def endpoint(bound_endpoint):
    return bound_endpoint("v3")


def published(endpoint, overdue_ms, published_ms_ago=6000, lease_in_s=None, **fields):
    """A row the relay published ``published_ms_ago`` (its copy is somewhere in the broker), due
    ``overdue_ms`` ago; ``lease_in_s``: a webhook call of it is out until then."""
    now = timezone.now()
    if lease_in_s is not None:
        fields["call_lease_until"] = now + timedelta(seconds=lease_in_s)
    return ScheduledMessage.objects.create(
        endpoint=endpoint, topology=endpoint.topology,
        published_at=now - timedelta(milliseconds=published_ms_ago),
        due_at=now - timedelta(milliseconds=overdue_ms), requested_delay_ms=5000,
        **{"status": Status.PUBLISHED, "payload": {}, **fields})


def rescue(endpoint, skip=()):
    return message_rescue_overdue(queues={endpoint.name}, skip=set(skip), publish=lambda out: broker().publish(out),
                                  limit=100)


def test_an_overdue_published_message_gets_a_copy_through_the_delivery_exchange(endpoint, amqp):
    row = published(endpoint, 1500)
    assert rescue(endpoint) == 1
    got, _ = wait_get(amqp, endpoint.name, timeout=3)
    assert got.headers["task"] == "scheduling.deliver" and got.headers[wire.H_MESSAGE_ID] == str(row.id)
    assert got.headers[wire.H_DUE_AT_MS] == row.due_at_ms  # the loop holds it to its own due time
    row.refresh_from_db()
    assert row.status == Status.PUBLISHED  # nothing is recorded: the copy that arrives first delivers


@pytest.mark.parametrize(("overdue_ms", "fields"), [
    (500, {}),  # not yet overdue by DELAY_RESCUE_AFTER_MS (1,000 ms)
    (1500, {"status": Status.PENDING}),  # the relay's (the sweeper publishes it)
    (1500, {"status": Status.DELIVERED}),
    (1500, {"status": Status.CANCELLED}),
    (1500, {"attempts": 1}),  # a handler retry: its own message, its own backoff
    (1500, {"delivery_mode": "timeout_manager"}),
    (5000, {"published_ms_ago": 500}),  # republished (or swept) late: its own copy's turn first
    (1500, {"lease_in_s": 30}),  # a webhook call of it is out
])
def test_nothing_else_is_copied(endpoint, amqp, overdue_ms, fields):
    published(endpoint, overdue_ms, **fields)
    assert rescue(endpoint) == 0
    assert get(amqp, endpoint.name) is None


def test_a_message_waiting_for_its_flow_keys_slot_is_left_alone(endpoint, amqp):
    """Late because its key's rate slots reach past the cutoff (flow control by key), not the broker;
    another key's, and a key whose slots are past, are copied."""
    waiting, other, past = published(endpoint, 3000, flow_key="hot"), published(endpoint, 3000, flow_key="calm"), \
        published(endpoint, 3000, flow_key="past")
    now_us = to_epoch_ms(timezone.now()) * 1000
    EndpointKeyFlow.objects.create(endpoint=endpoint, key="hot", next_slot_us=now_us + 2_000_000)
    EndpointKeyFlow.objects.create(endpoint=endpoint, key="past", next_slot_us=now_us - 5_000_000)
    assert rescue(endpoint) == 2
    copied = {wait_get(amqp, endpoint.name, timeout=3)[0].headers[wire.H_MESSAGE_ID] for _ in range(2)}
    assert copied == {str(other.id), str(past.id)} and str(waiting.id) not in copied


def test_what_the_loop_holds_and_other_queues_are_left_alone(endpoint, amqp):
    held, stuck = published(endpoint, 3000), published(endpoint, 2000)
    assert message_rescue_overdue(queues={"another-endpoint"}, skip=set(), publish=broker().publish, limit=10) == 0
    assert rescue(endpoint, skip={str(held.id)}) == 1
    got, _ = wait_get(amqp, endpoint.name, timeout=3)
    assert got.headers[wire.H_MESSAGE_ID] == str(stuck.id)
    assert get(amqp, endpoint.name) is None


def test_an_unbound_destination_s_copy_ends_in_the_unroutable_queue(endpoint, amqp):
    """The copy takes the last hop, not a shortcut: bindings still decide."""
    published(endpoint, 1500)
    amqp.unbind(cascade.endpoint_binding(cascade.V3, endpoint.name))
    assert rescue(endpoint) == 1
    assert wait_get(amqp, "dp.v3.delay-unroutable", timeout=3)[0].headers["task"] == "scheduling.deliver"
    assert get(amqp, endpoint.name) is None


def test_off_when_the_setting_is_zero(endpoint, amqp, settings):
    published(endpoint, 5000)
    settings.DELAY_RESCUE_AFTER_MS = 0
    assert rescue(endpoint) == 0
    assert get(amqp, endpoint.name) is None


def test_a_row_no_copy_can_be_built_of_fails_alone_and_the_others_are_rescued(endpoint, amqp, versions):
    """A row whose queue the cascade cannot carry (made before names were checked, say): failed with
    the reason, and the other overdue rows still get their copy."""
    odd = Endpoint.objects.create(name="odd name", queue="odd name", topology=versions["v3"])
    stuck, unbuildable = published(endpoint, 1500), published(odd, 1500)
    assert message_rescue_overdue(queues={endpoint.name, odd.queue}, skip=set(), limit=100,
                                  publish=lambda out: broker().publish(out)) == 1
    got, _ = wait_get(amqp, endpoint.name, timeout=3)
    assert got.headers[wire.H_MESSAGE_ID] == str(stuck.id)
    unbuildable.refresh_from_db()
    assert unbuildable.status == Status.FAILED and "destination 'odd name' must be letters" in unbuildable.last_error


# --- Celery-queue endpoints: the user's workers consume them, the claim skips a second copy ---------

TASK = {"task": "testapp.plain_receipt", "args": [1]}


@pytest.fixture
def task_endpoint(endpoint):
    Endpoint.objects.filter(pk=endpoint.pk).update(handler=Endpoint.Handler.CELERY_QUEUE)
    return Endpoint.objects.get(pk=endpoint.pk)


def rescue_tasks(busy=lambda queue: False):
    return message_rescue_overdue_tasks(publish=lambda out: broker().publish(out), limit=100, queue_busy=busy)


def test_an_overdue_task_gets_a_copy_in_its_queue_and_its_row_says_when(task_endpoint, amqp):
    row = published(task_endpoint, 2500, payload=TASK)
    assert rescue(task_endpoint) == 0  # not the loop's: no loop consumes a Celery queue
    assert rescue_tasks() == 1
    got, _ = wait_get(amqp, task_endpoint.queue, timeout=3)
    assert got.headers["task"] == "testapp.plain_receipt" and got.headers[wire.H_MESSAGE_ID] == str(row.id)
    assert got.headers.get("eta") is None  # an unmodified worker runs it at once
    row.refresh_from_db()
    assert row.status == Status.PUBLISHED and to_epoch_ms(row.published_at) == got.headers[wire.H_PUBLISHED_AT_MS]
    assert rescue_tasks() == 0 and get(amqp, task_endpoint.queue) is None  # another look (another worker's): none


@pytest.mark.parametrize(("late_at_last_copy_s", "waited_s", "copied"), [
    (-4, 5.5, False),  # overdue 1.5 s: a task leaves the cascade up to a unit (1 s) late, on time
    (-4, 6.5, True),  # never rescued: published before due, overdue by DELAY_RESCUE_AFTER_MS past that unit
    (1.2, 1.1, False),  # rescued 1.2 s late, waited 1.1 s since: not as long again
    (1.2, 1.3, True),
    (60, 59, False),  # its workers down for a while: the copies grow apart (60 s, then 120 s...)
    (60, 61, True),
])
def test_a_task_s_next_copy_waits_as_long_as_it_was_late(task_endpoint, amqp, late_at_last_copy_s, waited_s, copied):
    overdue_ms = int((late_at_last_copy_s + waited_s) * 1000)
    published(task_endpoint, overdue_ms, published_ms_ago=int(waited_s * 1000), payload=TASK)
    assert rescue_tasks() == int(copied)
    assert (get(amqp, task_endpoint.queue) is not None) == copied


@pytest.mark.parametrize("fields", [
    {"status": Status.DELIVERED}, {"status": Status.CANCELLED}, {"attempts": 1}, {"delivery_mode": "timeout_manager"},
])
def test_a_task_run_or_not_first_is_not_copied(task_endpoint, amqp, fields):
    published(task_endpoint, 2500, payload=TASK, **fields)
    assert rescue_tasks() == 0
    assert get(amqp, task_endpoint.queue) is None


def test_tasks_are_not_rescued_when_the_setting_is_zero(task_endpoint, amqp, settings):
    published(task_endpoint, 5000, payload=TASK)
    settings.DELAY_RESCUE_AFTER_MS = 0
    assert rescue_tasks() == 0


def test_a_busy_task_queue_is_left_to_its_workers(task_endpoint, amqp):
    """Its workers are behind or down (the loop says so: messages ready lately): the row's copy may
    be among them, so no copy is added (the gauge says the rows wait); once it is not, one is."""
    published(task_endpoint, 2500, payload=TASK)
    asked = []
    assert rescue_tasks(busy=lambda queue: asked.append(queue) or True) == 0 and asked == [task_endpoint.queue]
    assert get(amqp, task_endpoint.queue) is None
    assert rescue_tasks() == 1


def test_an_overdue_message_past_its_expiry_is_expired_not_rescued(endpoint, amqp):
    late = published(endpoint, 3000, expires_at=timezone.now() - timedelta(milliseconds=1))
    fine = published(endpoint, 2000, expires_at=timezone.now() + timedelta(minutes=5))
    assert rescue(endpoint) == 1
    got, _ = wait_get(amqp, endpoint.name, timeout=3)
    assert got.headers[wire.H_MESSAGE_ID] == str(fine.id)
    assert get(amqp, endpoint.name) is None
    late.refresh_from_db()
    assert late.status == Status.EXPIRED and "expired at" in late.last_error

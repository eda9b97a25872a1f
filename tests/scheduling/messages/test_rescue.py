"""The safety net against the live broker: an overdue first delivery whose row still says
``published`` gets a copy through its version's delivery exchange; nothing else does."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.messages import wire
from scheduling.config.conf import broker
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.messages.rescue import message_rescue_overdue
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
        endpoint=endpoint, topology=endpoint.topology, payload={},
        published_at=now - timedelta(milliseconds=published_ms_ago),
        due_at=now - timedelta(milliseconds=overdue_ms), requested_delay_ms=5000,
        **{"status": Status.PUBLISHED, **fields})


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

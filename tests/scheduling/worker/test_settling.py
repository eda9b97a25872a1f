"""The delivery loop's settling (scheduling/worker/settling.py) against the real broker: a copy is
acked only once it is done with (an envelope with its last message, never one given back whole);
an early or postponed copy is held again, unacked; a copy naming no row is set aside before its
ack. Acked or not is read from the queue once the connection is closed (an unacked copy comes back)."""

import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from rabbit import Received
from scheduling.config.conf import conf
from scheduling.core.clock import now_ms, to_epoch_ms
from scheduling.delivery.services import Outcome, Result
from scheduling.messages import wire
from scheduling.models.delivery import OrphanCopy
from scheduling.worker.holding import Held, Holding
from scheduling.worker.session import Session
from scheduling.worker.settling import Settling
from scheduling.worker.traces import Traces
from tests.topology.helpers import publish
from topology import cascade

pytestmark = pytest.mark.broker


@pytest.fixture
def queue(amqp):
    """An endpoint queue of the test's own (a classic queue), deleted at its end."""
    name = f"settling-{uuid.uuid4().hex[:8]}"
    amqp.declare_queue(cascade.Queue(name))
    try:
        yield name
    finally:
        amqp.delete_queue(name)


def settled(amqp, queue, settle) -> tuple[int, Holding]:
    """One broker message on ``queue``, received on a session and handed to ``settle(settling,
    message)``; how many messages the queue has ready once the session is closed, and the hold."""
    publish(amqp, "", queue, b"x")
    session, holding, received = Session(conf()), Holding(), list[Received]()
    settling = Settling(session, holding, Traces(), "test-worker")
    with session.open(received.append).connected() as consumer:
        consumer.consume(queue)
        deadline = time.monotonic() + 5
        while not received and time.monotonic() < deadline:
            consumer.wait(0.1, then_take=10)
        assert received, "the message never arrived"
        settle(settling, received[0])
    return amqp.queue_depth(queue), holding


def copy(message, message_id: str = "m-1") -> Held:
    return Held(now_ms(), 0, message, wire.Delivery(message_id, 0, now_ms()))


def test_a_delivered_copy_is_acked(amqp, queue):
    left, _ = settled(amqp, queue, lambda s, m: s.settle_all([(copy(m), Outcome(Result.DELIVERED))]))
    assert left == 0


def test_an_envelope_is_not_acked_while_a_message_of_it_is_unsettled(amqp, queue):
    def first_of_two(settling, message):
        settling.envelope(message.tag, 2)
        settling.settle_all([(copy(message, "m-1"), Outcome(Result.DELIVERED))])

    assert settled(amqp, queue, first_of_two)[0] == 1


def test_an_envelope_is_acked_with_its_last_message(amqp, queue):
    def both(settling, message):
        settling.envelope(message.tag, 2)
        settling.settle_all([(copy(message, "m-1"), Outcome(Result.DELIVERED))])
        settling.settle_all([(copy(message, "m-2"), Outcome(Result.DUPLICATE))])

    assert settled(amqp, queue, both)[0] == 0


def test_an_envelope_given_back_is_never_acked_by_a_message_of_it_settled_later(amqp, queue):
    def given_back(settling, message):
        settling.envelope(message.tag, 2)
        settling.give_back(message.tag)
        settling.settle_all([(copy(message, "m-1"), Outcome(Result.DELIVERED)),
                             (copy(message, "m-2"), Outcome(Result.DELIVERED))])

    assert settled(amqp, queue, given_back)[0] == 1


def test_an_early_copy_is_held_until_its_row_s_due_time_unacked(amqp, queue):
    eta = timezone.now() + timedelta(seconds=30)
    left, holding = settled(amqp, queue, lambda s, m: s.settle_all([(copy(m), Outcome(Result.EARLY, eta=eta))]))
    assert left == 1
    assert len(holding) == 1 and holding.wait_seconds(to_epoch_ms(eta) - 1000, 60) == pytest.approx(1.0)


def test_a_postponed_copy_is_held_for_the_broker_s_backoff_unacked(amqp, queue):
    left, holding = settled(amqp, queue, lambda s, m: s.settle_all([(copy(m), Outcome(Result.POSTPONED))]))
    assert left == 1
    (held,) = holding.clear()
    assert held.failures == 1 and held.due_ms > now_ms()


@pytest.mark.django_db
def test_a_copy_naming_no_row_is_set_aside_then_acked(amqp, queue):
    left, _ = settled(amqp, queue, lambda s, m: s.settle_all([(copy(m, "gone-1"), Outcome(Result.UNKNOWN))]))
    assert left == 0
    kept = OrphanCopy.objects.get(message_id="gone-1")
    assert (kept.queue, kept.attempt) == (queue, 0)

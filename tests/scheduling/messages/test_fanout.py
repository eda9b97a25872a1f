"""An event copy's far end against the live broker (messages/fanout.py): each row still waiting gets
its own copy through its version's delivery exchange, confirmed, and is stamped; a second copy of
the event, rows no longer waiting, a row none can be built of, a broker away: counted, not sent."""

from datetime import timedelta

import pytest
from django.utils import timezone

from harness.endpoints import bind_endpoint
from rabbit import BrokerUnavailable
from scheduling.config.conf import broker
from scheduling.core.clock import to_epoch_ms
from scheduling.messages import wire
from scheduling.messages.fanout import message_fan_out
from scheduling.models import Endpoint, Event, ScheduledMessage
from tests.topology.helpers import get, wait_get
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
Status = ScheduledMessage.Status


@pytest.fixture
def endpoints(platform, amqp):
    """Three endpoints on v3, their queues bound (removed after the test)."""
    made = []
    for n in range(3):
        name = f"fan-{n}-{timezone.now().timestamp():.6f}".replace(".", "-")
        bind_endpoint(amqp, cascade.V3, name)
        made.append(Endpoint.objects.create(name=name, queue=name, topology=platform["v3"]))
    yield made
    for endpoint in made:
        amqp.delete_queue(endpoint.queue)


def event_rows(endpoints, *, published_ms_ago=2000, **fields):
    """An event due now whose rows the relay published ``published_ms_ago`` (their copy went as one)."""
    now = timezone.now()
    event = Event.objects.create(team=endpoints[0].team, topic="invoice.paid", payload={"n": 1}, due_at=now,
                                 message_count=len(endpoints))
    rows = [ScheduledMessage.objects.create(
        endpoint=endpoint, topology=endpoint.topology, event=event, payload={"n": 1}, due_at=now,
        requested_delay_ms=5000, published_at=now - timedelta(milliseconds=published_ms_ago),
        **{"status": Status.PUBLISHED, **fields}) for endpoint in endpoints]
    return event, rows


def fan_out(event, rows, published_at_ms=None, publish=None):
    return message_fan_out(event_id=str(event.id), ids=[str(r.id) for r in rows],
                           published_at_ms=published_at_ms if published_at_ms is not None
                           else to_epoch_ms(max(r.published_at for r in rows)),
                           publish=publish or (lambda copies: broker().publish(copies)))


def test_each_row_gets_its_own_copy_at_its_endpoint_and_is_stamped(endpoints, amqp):
    event, rows = event_rows(endpoints)
    result = fan_out(event, rows)
    assert (result.published, result.skipped, result.unconfirmed) == (3, 0, 0) and result.done
    for endpoint, row in zip(endpoints, rows):
        got, _ = wait_get(amqp, endpoint.queue, timeout=3)
        assert got.headers["task"] == wire.DELIVER_TASK and got.headers[wire.H_MESSAGE_ID] == str(row.id)
        assert got.headers[wire.H_DUE_AT_MS] == row.due_at_ms  # the loop holds it to its own due time
        assert get(amqp, endpoint.queue) is None  # one copy each
        old = row.published_at
        row.refresh_from_db()
        assert row.status == Status.PUBLISHED and row.published_at > old  # stamped: a second copy skips it


def test_a_second_copy_of_the_event_fans_out_nothing(endpoints, amqp):
    event, rows = event_rows(endpoints)
    copy_time = to_epoch_ms(max(r.published_at for r in rows))
    assert fan_out(event, rows, copy_time).published == 3
    for endpoint in endpoints:
        assert wait_get(amqp, endpoint.queue, timeout=3)[0] is not None
    again = fan_out(event, rows, copy_time)  # the same copy handed over again (a worker killed before its ack)
    assert (again.published, again.skipped) == (0, 3)
    assert all(get(amqp, endpoint.queue) is None for endpoint in endpoints)


def test_a_row_published_in_the_copys_millisecond_is_fanned_out(endpoints, amqp):
    """The copy's x-dp-published-at-ms is the rows' publish time cut to the millisecond."""
    event, rows = event_rows(endpoints[:1])
    ScheduledMessage.objects.filter(pk=rows[0].pk).update(
        published_at=rows[0].published_at.replace(microsecond=rows[0].published_at.microsecond // 1000 * 1000 + 999))
    rows[0].refresh_from_db()
    assert fan_out(event, rows, to_epoch_ms(rows[0].published_at)).published == 1


@pytest.mark.parametrize("fields", [{"status": Status.DELIVERED}, {"status": Status.CANCELLED}, {"attempts": 1},
                                    {"status": Status.PENDING}])
def test_rows_no_longer_waiting_for_the_copy_are_skipped(endpoints, amqp, fields):
    event, rows = event_rows(endpoints[:1], **fields)
    waiting_event, waiting = event_rows(endpoints[1:2])
    ScheduledMessage.objects.filter(pk=waiting[0].pk).update(event=event)  # the same event
    result = fan_out(event, rows + waiting, to_epoch_ms(waiting[0].published_at))
    assert (result.published, result.skipped) == (1, 1)
    assert get(amqp, endpoints[0].queue) is None
    assert wait_get(amqp, endpoints[1].queue, timeout=3)[0].headers[wire.H_MESSAGE_ID] == str(waiting[0].id)


def test_another_events_row_named_in_the_copy_is_left_alone(endpoints, amqp):
    event, rows = event_rows(endpoints[:1])
    other, foreign = event_rows(endpoints[1:2])
    assert fan_out(event, rows + foreign).published == 1
    assert get(amqp, endpoints[1].queue) is None


def test_a_row_none_can_be_built_of_fails_alone_and_the_others_go(endpoints, amqp, platform):
    odd = Endpoint.objects.create(name="odd name", queue="odd name", topology=platform["v3"])
    event, rows = event_rows([endpoints[0], odd])
    result = fan_out(event, rows)
    assert (result.published, result.unbuildable) == (1, 1)
    assert wait_get(amqp, endpoints[0].queue, timeout=3)[0] is not None
    rows[1].refresh_from_db()
    assert rows[1].status == Status.FAILED and "destination 'odd name' must be letters" in rows[1].last_error


def test_a_broker_away_raises_and_stamps_nothing(endpoints):
    event, rows = event_rows(endpoints)
    with pytest.raises(BrokerUnavailable):
        fan_out(event, rows, publish=lambda copies: broker("amqp://guest:guest@127.0.0.1:1//").publish(copies))
    assert {r.published_at for r in ScheduledMessage.objects.filter(id__in=[r.id for r in rows])} == \
        {rows[0].published_at}


def test_an_unbound_endpoints_copy_ends_in_the_unroutable_queue(endpoints, amqp):
    """The copy takes the delivery exchange, as the rescue's: bindings still decide, nothing is dropped."""
    event, rows = event_rows(endpoints[:1])
    amqp.unbind(cascade.endpoint_binding(cascade.V3, endpoints[0].queue))
    assert fan_out(event, rows).published == 1
    assert wait_get(amqp, "dp.v3.delay-unroutable", timeout=3)[0].headers[wire.H_MESSAGE_ID] == str(rows[0].id)


def test_ids_with_no_row_at_all_are_named_missing(endpoints, amqp):
    import uuid

    event, rows = event_rows(endpoints[:1])
    gone = str(uuid.uuid4())
    result = message_fan_out(event_id=str(event.id), ids=[str(rows[0].id), gone], published_at_ms=None,
                             publish=broker().publish)
    assert (result.published, result.skipped, result.missing) == (1, 1, [gone])


def test_before_due_a_celery_queues_rows_wait_for_the_fan_out_at_due(endpoints, amqp):
    Endpoint.objects.filter(pk=endpoints[1].pk).update(handler=Endpoint.Handler.CELERY_QUEUE)
    event, rows = event_rows(endpoints[:2])
    ScheduledMessage.objects.filter(pk=rows[1].pk).update(payload={"task": "testapp.plain_receipt", "args": [1]})
    early = message_fan_out(
        event_id=str(event.id), ids=[str(r.id) for r in rows], published_at_ms=to_epoch_ms(rows[0].published_at),
        publish=broker().publish, tasks=False)
    assert (early.published, early.tasks_waiting) == (1, 1)
    assert get(amqp, endpoints[1].queue) is None  # its task would run the moment it arrived
    at_due = fan_out(event, rows, to_epoch_ms(rows[0].published_at))
    assert (at_due.published, at_due.skipped) == (1, 1)  # the other was fanned out already
    got, _ = wait_get(amqp, endpoints[1].queue, timeout=3)
    assert got.headers["task"] == "testapp.plain_receipt"


def test_a_worker_without_the_loop_fans_out_with_the_task(endpoints, amqp):
    """scheduling.fan_out_event, the fallback (run at the copy's eta): the loop's fan-out, once."""
    from scheduling.celery.tasks import fan_out_event

    event, rows = event_rows(endpoints)
    items = [[str(r.id), r.due_at_ms] for r in rows]
    copy_time = to_epoch_ms(max(r.published_at for r in rows))
    assert fan_out_event.apply(args=(str(event.id), items), headers={wire.H_PUBLISHED_AT_MS: copy_time}).get() == 3
    assert fan_out_event.apply(args=(str(event.id), items), headers={wire.H_PUBLISHED_AT_MS: copy_time}).get() == 0
    for endpoint in endpoints:
        assert wait_get(amqp, endpoint.queue, timeout=3)[0] is not None and get(amqp, endpoint.queue) is None


def test_several_event_copies_fan_out_together_each_counted_apart(endpoints, amqp):
    """The fan-out thread's batch: one transaction and one publish; a second copy of an event in the
    same batch finds its rows taken by the first."""
    from scheduling.messages.fanout import message_fan_out_many

    first, first_rows = event_rows(endpoints[:2])
    second, second_rows = event_rows(endpoints[2:])

    def copy(event, rows):
        return wire.EventCopy(str(event.id), tuple(wire.Delivery(str(r.id), 0, r.due_at_ms) for r in rows),
                              to_epoch_ms(rows[0].published_at))

    results = message_fan_out_many(copies=[(copy(first, first_rows), True), (copy(second, second_rows), True),
                                           (copy(first, first_rows), True)], publish=broker().publish)
    assert [(r.published, r.skipped) for r in results] == [(2, 0), (1, 0), (0, 2)]
    for endpoint in endpoints:
        assert wait_get(amqp, endpoint.queue, timeout=3)[0] is not None and get(amqp, endpoint.queue) is None

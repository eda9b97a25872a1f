"""Flow control's shared state in the real database: rate slots no two loops share, call slots
held for a transaction and freed by its end, a webhook over max_concurrent left untouched, and
the wait recorded apart from lateness."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from harness.at_once import at_once
from harness.recording_server import RecordingServer
from scheduling.core.flow_gate import Limit
from scheduling.delivery.flow_slots import endpoint_take_slots, endpoint_try_call_slot
from scheduling.delivery.services import Result, delivery_receive, delivery_receive_many
from scheduling.models import Endpoint, EndpointFlow, ScheduledMessage

Status = ScheduledMessage.Status


@pytest.fixture
def endpoint(endpoint_of):
    return endpoint_of("v3", max_deliveries_per_second=100)


def test_the_first_slot_is_now_and_the_next_run_follows_the_last(db, endpoint):
    limit = Limit(endpoint.pk, per_second=1)
    started = time.monotonic()
    assert endpoint_take_slots(limit=limit, count=10, spacing_us=1_000_000) == 0
    second = endpoint_take_slots(limit=limit, count=5, spacing_us=1_000_000)
    between_us = (time.monotonic() - started) * 1_000_000
    assert 10_000_000 - between_us <= second <= 10_000_000  # 10 x 1 s taken, less the time since
    with connection.cursor() as cursor:  # the next free slot is after the 15 taken
        cursor.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
        now_us = cursor.fetchone()[0]
    ahead_us = EndpointFlow.objects.get(endpoint=endpoint).next_slot_us - now_us
    assert 15_000_000 - between_us - 1_000_000 <= ahead_us <= 15_000_000


def test_loops_taking_slots_at_once_never_share_one(transactional_db, endpoint):
    """Eight loops, 10 takes of 3 slots each, at the same moment: every slot is its own. Slots 1 s
    apart, placed by each loop's clock read before its call (the database's delay counts from its
    statement, a little later): two loops given the same slots would be less than 0.5 s apart."""
    limit, spacing = Limit(endpoint.pk, per_second=1), 1_000_000
    taken, lock = [], threading.Lock()

    def loop():
        for _ in range(10):
            started_us = time.time() * 1_000_000
            first = endpoint_take_slots(limit=limit, count=3, spacing_us=spacing)
            with lock:
                taken.extend(started_us + first + i * spacing for i in range(3))

    at_once(loop, threads=8)
    taken.sort()
    assert len(taken) == 8 * 10 * 3
    gaps = [b - a for a, b in zip(taken, taken[1:])]
    assert min(gaps) > spacing / 2, min(gaps)  # none shared, none closer than the spacing (give or take)
    assert max(gaps) < spacing * 1.5, max(gaps)  # and none skipped: one run after another


def test_call_slots_are_held_by_their_transaction(transactional_db, endpoint):
    holding, release = threading.Barrier(3), threading.Event()

    def hold():
        with transaction.atomic():
            assert endpoint_try_call_slot(endpoint_id=endpoint.pk, concurrent=2)
            holding.wait(10)
            release.wait(10)
        connection.close()

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for thread in threads:
        thread.start()
    holding.wait(10)
    with transaction.atomic():  # both slots are held by the others
        assert not endpoint_try_call_slot(endpoint_id=endpoint.pk, concurrent=2)
        assert endpoint_try_call_slot(endpoint_id=endpoint.pk, concurrent=3)  # a third slot is free
    release.set()
    for thread in threads:
        thread.join(10)
    with transaction.atomic():  # their commits freed them: the first slot, held before, is free
        assert endpoint_try_call_slot(endpoint_id=endpoint.pk, concurrent=1)


def test_a_webhook_over_max_concurrent_is_busy_and_left_as_it_was(transactional_db, versions, endpoint_name,
                                                                   call_slot_held_elsewhere):
    with RecordingServer() as server:
        endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"], handler="webhook",
                                           handler_target=server.url, webhook_secret="s" * 32, max_concurrent=1)
        message = ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v3"], payload={},
                                                  due_at=timezone.now() - timedelta(seconds=1), requested_delay_ms=0,
                                                  status=Status.PUBLISHED)
        with call_slot_held_elsewhere(lambda: endpoint_try_call_slot(endpoint_id=endpoint.pk, concurrent=1)):
            outcome = delivery_receive(message_id=str(message.id))
        message.refresh_from_db()
        assert outcome.result is Result.BUSY
        assert (message.status, message.delivery_count, message.delivered_at) == (Status.PUBLISHED, 0, None)
        assert server.requests == []
        assert delivery_receive(message_id=str(message.id), throttled_ms=40).result is Result.DELIVERED
    message.refresh_from_db()
    assert (message.status, message.delivery_count, message.throttled_ms) == (Status.DELIVERED, 1, 40)
    assert len(server.requests) == 1


def test_the_deliver_task_tries_a_busy_webhook_again_and_records_nothing(transactional_db, versions, endpoint_name,
                                                                        monkeypatch, call_slot_held_elsewhere):
    """The fallback task (a worker without the delivery loop): a call slot taken elsewhere makes
    it retry soon; the message stays as it was."""
    from scheduling.celery.tasks import BUSY_RETRY_SECONDS, deliver

    class Retried(Exception):
        pass

    retries = []

    def retry(**kwargs):
        retries.append(kwargs)
        return Retried()

    monkeypatch.setattr(deliver, "retry", retry)
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"], handler="webhook",
                                       handler_target="http://127.0.0.1:9/hook", webhook_secret="s" * 32,
                                       max_concurrent=1)
    message = ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v3"], payload={},
                                              due_at=timezone.now() - timedelta(seconds=1), requested_delay_ms=0,
                                              status=Status.PUBLISHED)
    with (call_slot_held_elsewhere(lambda: endpoint_try_call_slot(endpoint_id=endpoint.pk, concurrent=1)),
          pytest.raises(Retried)):
        deliver.run(str(message.id))
    assert retries == [{"countdown": BUSY_RETRY_SECONDS}]
    message.refresh_from_db()
    assert (message.status, message.delivery_count) == (Status.PUBLISHED, 0)


def test_the_batch_path_records_the_wait_beside_the_lateness(db, endpoint):
    message = ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, payload={},
                                              due_at=timezone.now() - timedelta(milliseconds=300),
                                              requested_delay_ms=0, status=Status.PUBLISHED,
                                              created_at=timezone.now() - timedelta(hours=1))
    (outcome,) = delivery_receive_many(items=[(str(message.id), 0, None, 250)])
    message.refresh_from_db()
    assert outcome.result is Result.DELIVERED
    assert message.throttled_ms == 250 and message.lateness_ms >= 300

"""Flow control by key's shared state in the real database: a key's rate slots apart from its
endpoint's and from other keys', loops taking one key's slots at once never sharing one, the
table kept to the keys of the last minute, and a key's call slots held per connection."""

import threading
import time
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from harness.at_once import at_once
from harness.recording_server import RecordingServer
from scheduling.core.flow_gate import Limit
from scheduling.delivery.flow_slots import (
    endpoint_key_flow_forget,
    endpoint_key_lock_id,
    endpoint_key_release_call_slots,
    endpoint_key_take_call_slots,
    endpoint_key_take_slots,
    endpoint_key_take_slots_many,
    endpoint_key_try_call_slot,
    endpoint_take_call_slots,
    endpoint_take_slots,
)
from scheduling.delivery.services import Result, delivery_receive
from scheduling.models import Endpoint, EndpointKeyFlow, ScheduledMessage

Status = ScheduledMessage.Status


def test_a_keys_slots_are_its_own(db, endpoint_of):
    endpoint = endpoint_of("v3", max_deliveries_per_second_per_key=1)
    limit = Limit(endpoint.pk, per_key_second=1)
    assert endpoint_key_take_slots(limit=limit, key="a", count=5, spacing_us=1_000_000) == 0
    assert endpoint_key_take_slots(limit=limit, key="a", count=1, spacing_us=1_000_000) > 4_000_000  # after a's 5
    assert endpoint_key_take_slots(limit=limit, key="b", count=1, spacing_us=1_000_000) == 0  # another key: free
    assert endpoint_take_slots(limit=limit, count=1, spacing_us=1_000_000) == 0  # the endpoint's: untouched
    other = Endpoint.objects.create(name=f"{endpoint.name}-2", queue=f"{endpoint.queue}-2", topology=endpoint.topology)
    assert endpoint_key_take_slots(limit=Limit(other.pk, per_key_second=1), key="a", count=1, spacing_us=1_000_000) == 0
    assert EndpointKeyFlow.objects.filter(endpoint=endpoint).count() == 2


def test_loops_taking_one_keys_slots_at_once_never_share_one(transactional_db, endpoint_of):
    endpoint = endpoint_of("v3", max_deliveries_per_second_per_key=1)
    limit, spacing = Limit(endpoint.pk, per_key_second=1), 1_000_000
    taken, lock = [], threading.Lock()

    def loop():
        for _ in range(5):
            started_us = time.time() * 1_000_000
            first = endpoint_key_take_slots(limit=limit, key="k", count=2, spacing_us=spacing)
            with lock:
                taken.extend(started_us + first + i * spacing for i in range(2))
        connection.close()

    at_once(loop, threads=6)
    taken.sort()
    assert len(taken) == 6 * 5 * 2
    gaps = [b - a for a, b in zip(taken, taken[1:])]
    assert min(gaps) > spacing / 2, min(gaps)
    assert max(gaps) < spacing * 1.5, max(gaps)


def test_many_keys_take_their_slots_in_one_statement(db, endpoint_of):
    endpoint = endpoint_of("v3", max_deliveries_per_second_per_key=1)
    limit = Limit(endpoint.pk, per_key_second=1)
    endpoint_key_take_slots(limit=limit, key="busy", count=3, spacing_us=1_000_000)
    keys = {f"k{n}": 1 for n in range(2000)} | {"busy": 2}
    firsts = endpoint_key_take_slots_many(limit=limit, counts=keys, spacing_us=1_000_000)
    assert firsts.keys() == keys.keys()
    assert {first for key, first in firsts.items() if key != "busy"} == {0}  # new keys: free now
    assert 2_000_000 < firsts["busy"] <= 3_000_000  # after its 3 taken before
    assert endpoint_key_take_slots(limit=limit, key="busy", count=1, spacing_us=1_000_000) > 4_000_000
    assert EndpointKeyFlow.objects.filter(endpoint=endpoint).count() == 2001


def test_loops_taking_overlapping_keys_at_once_share_no_slot_and_never_deadlock(transactional_db, endpoint_of):
    endpoint = endpoint_of("v3", max_deliveries_per_second_per_key=1)
    limit, spacing = Limit(endpoint.pk, per_key_second=1), 1_000_000
    taken, lock = {}, threading.Lock()

    def loop():
        for _ in range(5):
            started_us = time.time() * 1_000_000
            firsts = endpoint_key_take_slots_many(limit=limit, counts={k: 1 for k in "edcba"}, spacing_us=spacing)
            with lock:
                for key, first in firsts.items():
                    taken.setdefault(key, []).append(started_us + first)
        connection.close()

    at_once(loop, threads=6)
    for key, times in taken.items():
        times.sort()
        assert len(times) == 30 and min(b - a for a, b in zip(times, times[1:])) > spacing / 2, key


def test_rows_whose_slot_is_long_past_are_forgotten(db, endpoint_of):
    endpoint = endpoint_of("v3", max_deliveries_per_second_per_key=1)
    limit = Limit(endpoint.pk, per_key_second=1)
    for key in ("old-1", "old-2", "recent"):
        endpoint_key_take_slots(limit=limit, key=key, count=1, spacing_us=1_000_000)
    EndpointKeyFlow.objects.filter(key__startswith="old").update(next_slot_us=(time.time() - 120) * 1_000_000)
    assert endpoint_key_flow_forget(older_than_s=60) == 2
    assert list(EndpointKeyFlow.objects.values_list("key", flat=True)) == ["recent"]
    # a forgotten key's next slot is now, as it was: its row is made again
    assert endpoint_key_take_slots(limit=limit, key="old-1", count=1, spacing_us=1_000_000) == 0


def test_a_keys_call_slots_are_apart_from_other_keys_and_the_endpoints(transactional_db, endpoint_of):
    endpoint = endpoint_of("v3", handler="webhook", handler_target="http://127.0.0.1:9/", max_concurrent_per_key=2)
    assert endpoint_key_lock_id(endpoint_id=endpoint.pk, key="a") != \
        endpoint_key_lock_id(endpoint_id=endpoint.pk, key="b")
    mine = endpoint_key_take_call_slots(endpoint_id=endpoint.pk, key="a", concurrent=2, held=[], count=5)
    assert sorted(mine) == [0, 1]
    assert endpoint_key_take_call_slots(endpoint_id=endpoint.pk, key="a", concurrent=2, held=mine, count=1) == []
    elsewhere = {}

    def other_worker():  # another connection: a's slots are taken, b's and the endpoint's are free
        elsewhere["a"] = endpoint_key_take_call_slots(endpoint_id=endpoint.pk, key="a", concurrent=2, held=[], count=2)
        elsewhere["b"] = endpoint_key_take_call_slots(endpoint_id=endpoint.pk, key="b", concurrent=2, held=[], count=2)
        elsewhere["endpoint"] = endpoint_take_call_slots(endpoint_id=endpoint.pk, concurrent=2, held=[], count=2)
        connection.close()  # and with it its locks

    at_once(other_worker, threads=1)
    assert elsewhere == {"a": [], "b": [0, 1], "endpoint": [0, 1]}
    endpoint_key_release_call_slots(endpoint_id=endpoint.pk, key="a", slots=[mine[0]])
    at_once(other_worker, threads=1)
    assert len(elsewhere["a"]) == 1
    endpoint_key_release_call_slots(endpoint_id=endpoint.pk, key="a", slots=[mine[1]])


def test_the_one_by_one_path_keeps_a_keys_call_slots(transactional_db, versions, endpoint_name,
                                                      call_slot_held_elsewhere):
    """The deliver task's path (a worker without the delivery loop): a webhook of a key whose slots
    are held elsewhere is BUSY and left as it was; another key's, or one without a key, is called."""
    with RecordingServer() as server:
        endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"],
                                           handler="webhook", handler_target=server.url, webhook_secret="s" * 32,
                                           max_concurrent_per_key=1)

        def message(key):
            return ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v3"], payload={},
                                                   due_at=timezone.now() - timedelta(seconds=1), requested_delay_ms=0,
                                                   status=Status.PUBLISHED, flow_key=key)

        busy, other, unkeyed = message("a"), message("b"), message(None)
        with call_slot_held_elsewhere(lambda: endpoint_key_try_call_slot(endpoint_id=endpoint.pk, key="a",
                                                                          concurrent=1)):
            assert delivery_receive(message_id=str(busy.id)).result is Result.BUSY
            assert delivery_receive(message_id=str(other.id)).result is Result.DELIVERED
            assert delivery_receive(message_id=str(unkeyed.id)).result is Result.DELIVERED
        busy.refresh_from_db()
        assert (busy.status, busy.delivery_count) == (Status.PUBLISHED, 0)
        assert len(server.requests) == 2
        assert delivery_receive(message_id=str(busy.id)).result is Result.DELIVERED

"""models/querysets.py's bulk statements in the real database: each writes what it is given and
only on the rows its compare-and-set allows, locks what it says, and loads what its caller reads."""

import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from scheduling.core.lifecycle import Status
from scheduling.db.sql import int_array, uuid_array
from scheduling.models import Endpoint, ScheduledMessage

pytestmark = pytest.mark.django_db
NONE = (Endpoint.Handler.NONE,)


def test_the_array_literals():
    ids = [uuid.UUID(int=1), uuid.UUID(int=2)]
    assert uuid_array(ids) == "{00000000-0000-0000-0000-000000000001,00000000-0000-0000-0000-000000000002}"
    assert int_array([1, None, -3]) == "{1,NULL,-3}"
    assert uuid_array([]) == int_array([]) == "{}"


def test_insert_many_writes_every_field_through_copy(endpoint_row):
    now = timezone.now()
    rows = [ScheduledMessage(endpoint=endpoint_row, topology=endpoint_row.topology, payload={"n": n, "s": "é"},
                             due_at=now + timedelta(seconds=n), requested_delay_ms=n * 1000) for n in range(3)]
    ScheduledMessage.objects.insert_many(rows)
    ScheduledMessage.objects.insert_many([])  # nothing, no statement
    stored = {m.id: m for m in ScheduledMessage.objects.all()}
    assert sorted(stored) == sorted(r.id for r in rows)
    for row in rows:
        assert (stored[row.id].payload, stored[row.id].due_at, stored[row.id].status) == (row.payload, row.due_at,
                                                                                         Status.PENDING)


def test_save_delivery_state_writes_the_delivery_fields_of_each_row(make_rows):
    first, second = make_rows(2)
    now = timezone.now()
    first.status, first.delivered_at, first.lateness_ms, first.delivery_count = Status.DELIVERED, now, 12, 1
    second.status, second.last_error, second.attempts = Status.FAILED, "boom", 3
    second.payload = {"not": "written"}  # not a delivery field
    ScheduledMessage.objects.save_delivery_state([first, second])
    a, b = (ScheduledMessage.objects.get(pk=r.pk) for r in (first, second))
    assert (a.status, a.delivered_at, a.lateness_ms, a.delivery_count) == (Status.DELIVERED, now, 12, 1)
    assert (b.status, b.last_error, b.attempts, b.payload) == (Status.FAILED, "boom", 3, {"n": 1})


def test_locked_for_delivery_loads_its_rows_with_their_endpoints_parts(make_rows, endpoint_row):
    rows = make_rows(2)
    with transaction.atomic():
        loaded = ScheduledMessage.objects.locked_for_delivery([r.id for r in rows] + [uuid.uuid4()])
        assert sorted(m.id for m in loaded) == sorted(r.id for r in rows)  # an unknown id: no row
        m = loaded[0]
        assert (m.endpoint_team_id, m.endpoint_handler, m.endpoint_queue) == (
            endpoint_row.team_id, endpoint_row.handler, endpoint_row.queue)
        assert "payload" not in m.__dict__ and m.payload in ({"n": 0}, {"n": 1})  # loaded on access
    assert ScheduledMessage.objects.locked_for_delivery([]) == []


def test_handler_data_gives_each_payload_with_its_endpoint(make_rows, endpoint_row):
    rows = make_rows(2)
    data = ScheduledMessage.objects.handler_data([r.id for r in rows])
    assert {i: (payload, endpoint.pk) for i, (payload, endpoint) in data.items()} == {
        rows[0].id: ({"n": 0}, endpoint_row.pk), rows[1].id: ({"n": 1}, endpoint_row.pk)}


def test_lock_ids_takes_only_the_rows_in_the_status(make_rows):
    pending, published = make_rows(1)[0], make_rows(1, status=Status.PUBLISHED)[0]
    with transaction.atomic():
        assert ScheduledMessage.objects.lock_ids([pending.id, published.id], status=Status.PUBLISHED) == {published.id}


def test_set_published_leaves_a_row_that_moved_on(make_rows):
    moved, waiting = make_rows(2)
    ScheduledMessage.objects.filter(pk=moved.pk).update(status=Status.DELIVERED)
    for row in (moved, waiting):
        row.routing_key, row.first_exchange = "0.1", "dp.l1"
    now = timezone.now()
    count = ScheduledMessage.objects.set_published([moved, waiting], status=Status.PUBLISHED, published_at=now,
                                                  from_statuses={Status.PENDING})
    assert count == 1
    assert ScheduledMessage.objects.get(pk=moved.pk).status == Status.DELIVERED
    row = ScheduledMessage.objects.get(pk=waiting.pk)
    assert (row.status, row.published_at, row.routing_key, row.first_exchange) == (Status.PUBLISHED, now, "0.1", "dp.l1")


def test_the_prune_batch_locks_in_created_order_and_deletes_only_the_batch(make_rows):
    rows = make_rows(3)
    for n, row in enumerate(rows):
        ScheduledMessage.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(hours=3 - n))
    with transaction.atomic():
        count, last = ScheduledMessage.objects.lock_prune_batch(ScheduledMessage.objects.all(), limit=2)
        assert count == 2 and last[1] == rows[1].id  # the two oldest; the next batch starts after it
        assert ScheduledMessage.objects.delete_prune_batch() == 2
    assert list(ScheduledMessage.objects.values_list("id", flat=True)) == [rows[2].id]


def _item(row, attempt=0, queue=None):
    return (str(row.id), attempt, None, None, queue)


def test_deliver_in_flight_takes_only_due_in_flight_copies_of_their_attempt_and_queue(make_rows, endpoint_row):
    now = timezone.now()
    due = dict(due_at=now - timedelta(seconds=1), created_at=now - timedelta(seconds=2))  # late by 1 s
    taken, later, delivered, keyed, expired, other_queue, retry = (
        make_rows(1, **due)[0], make_rows(1, due_at=now + timedelta(hours=1))[0],
        make_rows(1, status=Status.DELIVERED, **due)[0], make_rows(1, ordering_key="k", **due)[0],
        make_rows(1, expires_at=now - timedelta(milliseconds=1), **due)[0], make_rows(1, **due)[0],
        make_rows(1, **due)[0])
    items = [_item(taken, queue=endpoint_row.queue), _item(later), _item(delivered), _item(keyed), _item(expired),
             _item(other_queue, queue="another-endpoint"), _item(retry, attempt=1)]
    rows = ScheduledMessage.objects.deliver_in_flight(items, now=now, by="w1", handlers=NONE)
    assert [(n, attempt) for n, _, _, _, attempt, _, _ in rows] == [(0, 0)]  # the index in items
    row = ScheduledMessage.objects.get(pk=taken.pk)
    assert (row.status, row.delivered_at, row.delivered_by, row.delivery_count) == (Status.DELIVERED, now, "w1", 1)
    assert row.lateness_ms == rows[0][3] == 1000  # from due_at, created before it
    untouched = ScheduledMessage.objects.exclude(pk=taken.pk).values_list("status", "delivery_count")
    assert sorted(untouched) == sorted([(Status.PENDING, 0)] * 5 + [(Status.DELIVERED, 0)])
    assert ScheduledMessage.objects.deliver_in_flight([_item(taken)], now=now, by="w2", handlers=NONE) == []


def test_deliver_in_flight_leaves_an_endpoint_whose_handler_is_not_named(make_rows):
    row = make_rows(1, due_at=timezone.now())[0]
    assert ScheduledMessage.objects.deliver_in_flight([_item(row)], now=timezone.now(), by="w",
                                                      handlers=(Endpoint.Handler.WEBHOOK,)) == []
    assert ScheduledMessage.objects.get(pk=row.pk).status == Status.PENDING

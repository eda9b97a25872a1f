"""The deliveries' log under ``scheduling.deliveries``: one INFO line per batch (count, endpoints,
lateness p50 and max, worker) with the fields a JSON log carries, and at DEBUG one line per
delivery as before; written when the transaction commits; nothing for a duplicate; names learnt
once per process, so a warm batch costs no query, and a silenced logger costs nothing."""

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.delivery.log import Delivered, delivery_log_on_commit
from scheduling.delivery.services import Result, delivery_receive_many
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.observability import label_names

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows(versions, endpoint_name):
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"])
    now = timezone.now()
    return [ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v2"], payload={}, requested_delay_ms=0,
                                            due_at=now - timedelta(milliseconds=20 + 30 * n),
                                            created_at=now - timedelta(hours=1),
                                            status=ScheduledMessage.Status.PUBLISHED) for n in range(3)]


@pytest.fixture
def deliveries(caplog):
    caplog.set_level(logging.INFO, logger="scheduling.deliveries")
    label_names.forget()
    return lambda level=logging.INFO: [r for r in caplog.records
                                       if r.name == "scheduling.deliveries" and r.levelno == level]


def test_one_info_line_per_batch_with_its_fields_once_committed(rows, deliveries, endpoint_name,
                                                                django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = delivery_receive_many(items=[(str(r.id), 0) for r in rows], by="w1@host")
        assert deliveries() == []  # not before the commit
    assert [o.result for o in outcomes] == [Result.DELIVERED] * 3
    lateness = sorted(ScheduledMessage.objects.get(id=r.id).lateness_ms for r in rows)
    (record,) = deliveries()
    assert (record.count, record.endpoints, record.worker) == (3, {f"default/{endpoint_name}": 3}, "w1@host")
    assert (record.lateness_p50_ms, record.lateness_max_ms) == (lateness[1], lateness[2])  # nearest rank
    assert record.getMessage() == (f"delivered 3 messages (default/{endpoint_name} 3): lateness p50 {lateness[1]} ms, "
                                   f"max {lateness[2]} ms, worker w1@host")
    assert deliveries(logging.DEBUG) == []  # the per-message lines only at DEBUG


def test_at_debug_a_line_per_delivery_with_its_fields(rows, deliveries, caplog, endpoint_name,
                                                      django_capture_on_commit_callbacks):
    caplog.set_level(logging.DEBUG, logger="scheduling.deliveries")
    with django_capture_on_commit_callbacks(execute=True):
        delivery_receive_many(items=[(str(r.id), 0) for r in rows], by="w1@host")
    records = deliveries(logging.DEBUG)
    assert sorted(r.message_id for r in records) == sorted(str(r.id) for r in rows)
    for record in records:
        row = ScheduledMessage.objects.get(id=record.message_id)
        # the message's own version (v2), not its endpoint's (v3)
        assert (record.team, record.endpoint, record.version, record.attempt, record.worker) == (
            "default", endpoint_name, "v2", 0, "w1@host")
        assert record.lateness_ms == row.lateness_ms >= 20
        assert record.getMessage() == f"delivered {row.id} to default/{endpoint_name} (v2), {row.lateness_ms} ms late"
    assert len(deliveries()) == 1  # and the summary


def test_both_paths_of_one_batch_make_one_summary(rows, deliveries, endpoint_name, django_capture_on_commit_callbacks):
    """The set-based statement delivers the first two, the one-by-one path the third (its first
    copy, for a due time it no longer has, is superseded): one line for the batch."""
    third = rows[2]
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = delivery_receive_many(items=[(str(rows[0].id), 0), (str(rows[1].id), 0),
                                                (str(third.id), 0, third.due_at_ms - 5), (str(third.id), 0)])
    assert [o.result for o in outcomes] == [Result.DELIVERED, Result.DELIVERED, Result.SUPERSEDED, Result.DELIVERED]
    (record,) = deliveries()
    assert record.count == 3 and record.endpoints == {f"default/{endpoint_name}": 3} and record.worker == ""


def test_a_duplicate_logs_no_delivery(rows, deliveries, django_capture_on_commit_callbacks):
    items = [(str(rows[0].id), 0)]
    with django_capture_on_commit_callbacks(execute=True):
        delivery_receive_many(items=items)
        assert delivery_receive_many(items=items)[0].result is Result.DUPLICATE
    assert [r.count for r in deliveries()] == [1]


def test_names_are_learnt_once(rows, deliveries, django_assert_num_queries, django_capture_on_commit_callbacks):
    with django_assert_num_queries(2), django_capture_on_commit_callbacks(execute=True):
        delivery_log_on_commit(messages=rows[:1])
    with django_assert_num_queries(0), django_capture_on_commit_callbacks(execute=True):
        delivery_log_on_commit(messages=rows)
    assert [r.count for r in deliveries()] == [1, 3]


def test_unknown_names_stand_in_as_ids(deliveries, django_capture_on_commit_callbacks):
    """A database away (or ids without a row): the line still goes out, ids for names."""
    with django_capture_on_commit_callbacks(execute=True):
        delivery_log_on_commit(messages=[Delivered("m1", 10**12, 10**12, 7, 0), Delivered("m2", 10**12, 10**12, 9, 0)],
                               by="w")
    (record,) = deliveries()
    assert record.endpoints == {f"/{10**12}": 2} and (record.lateness_p50_ms, record.lateness_max_ms) == (7, 9)


def test_silenced_it_costs_nothing(rows, deliveries, caplog, django_capture_on_commit_callbacks):
    caplog.set_level(logging.WARNING, logger="scheduling.deliveries")
    with django_capture_on_commit_callbacks() as callbacks:
        delivery_log_on_commit(messages=rows)
    assert callbacks == [] and deliveries() == []

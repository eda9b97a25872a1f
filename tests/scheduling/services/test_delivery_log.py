"""One INFO line per recorded delivery under ``scheduling.deliveries``, with the fields a JSON log
carries, written when the transaction commits; none for a duplicate; names learnt once per process,
so a warm batch costs no query, and a silenced logger costs nothing."""

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Endpoint, ScheduledMessage
from scheduling.observability import label_names
from scheduling.services.delivery import Result, delivery_receive_many
from scheduling.services.delivery_log import delivery_log_on_commit

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows(versions, endpoint_name):
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"])
    now = timezone.now()
    return [ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v2"], payload={}, requested_delay_ms=0,
                                            due_at=now - timedelta(milliseconds=20), created_at=now - timedelta(hours=1),
                                            status=ScheduledMessage.Status.PUBLISHED) for _ in range(2)]


@pytest.fixture
def deliveries(caplog):
    caplog.set_level(logging.INFO, logger="scheduling.deliveries")
    label_names.forget()
    return lambda: [r for r in caplog.records if r.name == "scheduling.deliveries"]


def test_a_line_per_delivery_with_its_fields_once_committed(rows, deliveries, endpoint_name,
                                                             django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = delivery_receive_many(items=[(str(r.id), 0) for r in rows], by="w1@host")
        assert deliveries() == []  # not before the commit
    assert [o.result for o in outcomes] == [Result.DELIVERED, Result.DELIVERED]
    records = deliveries()
    assert [r.message_id for r in records] == [str(r.id) for r in rows]
    for record, row in zip(records, rows):
        row.refresh_from_db()
        # the message's own version (v2), not its endpoint's (v3)
        assert (record.team, record.endpoint, record.version, record.attempt, record.worker) == (
            "default", endpoint_name, "v2", 0, "w1@host")
        assert record.lateness_ms == row.lateness_ms >= 20
        assert record.getMessage() == f"delivered {row.id} to default/{endpoint_name} (v2), {row.lateness_ms} ms late"


def test_a_duplicate_logs_no_delivery(rows, deliveries, django_capture_on_commit_callbacks):
    items = [(str(rows[0].id), 0)]
    with django_capture_on_commit_callbacks(execute=True):
        delivery_receive_many(items=items)
        assert delivery_receive_many(items=items)[0].result is Result.DUPLICATE
    assert len(deliveries()) == 1


def test_names_are_learnt_once(rows, deliveries, django_assert_num_queries, django_capture_on_commit_callbacks):
    with django_assert_num_queries(2), django_capture_on_commit_callbacks(execute=True):
        delivery_log_on_commit(messages=rows[:1])
    with django_assert_num_queries(0), django_capture_on_commit_callbacks(execute=True):
        delivery_log_on_commit(messages=rows)
    assert len(deliveries()) == 3


def test_silenced_it_costs_nothing(rows, deliveries, caplog, django_capture_on_commit_callbacks):
    caplog.set_level(logging.WARNING, logger="scheduling.deliveries")
    with django_capture_on_commit_callbacks() as callbacks:
        delivery_log_on_commit(messages=rows)
    assert callbacks == [] and deliveries() == []

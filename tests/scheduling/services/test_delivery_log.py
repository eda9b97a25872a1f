"""One INFO line per recorded delivery under ``scheduling.deliveries``, with the fields a JSON log
carries; none for a duplicate; no query at all when the logger is silenced."""

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Endpoint, ScheduledMessage
from scheduling.services.delivery import Result, delivery_receive_many
from scheduling.services.delivery_log import deliveries_logged

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows(versions, endpoint_name):
    endpoint = Endpoint.objects.create(name=endpoint_name, topology=versions["v3"])
    now = timezone.now()
    return [ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v2"], payload={}, requested_delay_ms=0,
                                            due_at=now - timedelta(milliseconds=20), created_at=now - timedelta(hours=1),
                                            status=ScheduledMessage.Status.PUBLISHED) for _ in range(2)]


def delivery_records(caplog):
    return [r for r in caplog.records if r.name == "scheduling.deliveries"]


def test_a_line_per_delivery_with_its_fields(rows, caplog, endpoint_name):
    caplog.set_level(logging.INFO, logger="scheduling.deliveries")
    outcomes = delivery_receive_many([(str(r.id), 0) for r in rows], by="w1@host")
    assert [o.result for o in outcomes] == [Result.DELIVERED, Result.DELIVERED]
    records = delivery_records(caplog)
    assert [r.message_id for r in records] == [str(r.id) for r in rows]
    for record, row in zip(records, rows):
        row.refresh_from_db()
        # the message's own version (v2), not its endpoint's (v3)
        assert (record.endpoint, record.version, record.attempt, record.worker) == (endpoint_name, "v2", 0, "w1@host")
        assert record.lateness_ms == row.lateness_ms >= 20
        assert record.getMessage() == f"delivered {row.id} to {endpoint_name} (v2), {row.lateness_ms} ms late"


def test_a_duplicate_logs_no_delivery(rows, caplog):
    caplog.set_level(logging.INFO, logger="scheduling.deliveries")
    items = [(str(rows[0].id), 0)]
    delivery_receive_many(items)
    assert delivery_receive_many(items)[0].result is Result.DUPLICATE
    assert len(delivery_records(caplog)) == 1


def test_silenced_it_costs_no_query(rows, caplog, django_assert_num_queries):
    caplog.set_level(logging.WARNING, logger="scheduling.deliveries")
    with django_assert_num_queries(0):
        deliveries_logged(rows)
    caplog.set_level(logging.INFO, logger="scheduling.deliveries")
    with django_assert_num_queries(1):
        deliveries_logged(rows)
    assert len(delivery_records(caplog)) == 2

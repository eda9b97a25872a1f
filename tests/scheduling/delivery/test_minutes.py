"""The per-minute delivery figures the dashboard reads: written by the delivery path in the
transaction that records the delivery, once per message delivered, never for a hand-over that
delivered nothing (a duplicate, a cancelled message, a handler that failed, a Celery task run again
after a crash)."""

import uuid
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone

from scheduling.celery.services import celery_task_claim
from scheduling.core.lateness_buckets import bucket_ms
from scheduling.delivery.minutes import delivery_minute_record
from scheduling.delivery.services import Result, delivery_receive_many
from scheduling.models import DeliveryMinute, Endpoint, ScheduledMessage, default_team_id

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


@pytest.fixture
def published(versions, endpoint_name):
    def make(n=1, handler="none", target="", late=timedelta(milliseconds=40)):
        endpoint, _ = Endpoint.objects.get_or_create(
            name=f"{endpoint_name}-{handler}", defaults=dict(queue=f"{endpoint_name}-{handler}", topology=versions["v3"],
                                                             handler=handler,
                                                             handler_target=target))
        now = timezone.now()
        return [ScheduledMessage.objects.create(
            endpoint=endpoint, topology=versions["v3"], payload={"n": i}, due_at=now - late - timedelta(milliseconds=i),
            requested_delay_ms=0, status=Status.PUBLISHED, created_at=now - timedelta(hours=1)) for i in range(n)]

    return make


def recorded() -> dict[int, int]:
    """bucket -> deliveries, over every minute and shard."""
    return dict(DeliveryMinute.objects.values_list("bucket_ms").annotate(n=Sum("deliveries")))


def test_a_batch_is_counted_once_per_delivered_message_in_its_minute_and_bucket(published):
    rows = published(5)
    outcomes = delivery_receive_many(items=[(str(r.id), 0) for r in rows] + [(str(rows[0].id), 0)])  # + a duplicate
    assert [o.result for o in outcomes] == [Result.DELIVERED] * 5 + [Result.DUPLICATE]
    delivered = ScheduledMessage.objects.filter(id__in=[r.id for r in rows])
    expected: dict[int, int] = {}
    for m in delivered:
        expected[bucket_ms(m.lateness_ms)] = expected.get(bucket_ms(m.lateness_ms), 0) + 1
    assert recorded() == expected and sum(expected.values()) == 5
    minutes = {m.delivered_at.replace(second=0, microsecond=0) for m in delivered}
    assert set(DeliveryMinute.objects.values_list("minute", flat=True)) == minutes
    largest = DeliveryMinute.objects.order_by("-lateness_max_ms").values_list("lateness_max_ms", flat=True).first()
    assert largest == max(m.lateness_ms for m in delivered)
    delivery_receive_many(items=[(str(r.id), 0) for r in rows])  # every one a duplicate now
    assert sum(recorded().values()) == 5


def test_cancelled_messages_and_failed_handlers_are_not_deliveries(published, settings):
    settings.DELAY_CELERY_TASK_ALLOWLIST = []  # the task is refused in the worker: a failed attempt
    (refused,) = published(1, handler="celery_task", target="testapp.record_receipt")
    (cancelled,) = published(1)
    ScheduledMessage.objects.filter(id=cancelled.id).update(status=Status.CANCELLED)
    outcomes = delivery_receive_many(items=[(str(refused.id), 0), (str(cancelled.id), 0)])
    assert [o.result for o in outcomes] == [Result.RETRY, Result.CANCELLED]
    assert recorded() == {}


def test_a_retry_that_succeeds_is_counted_once_with_the_first_hand_overs_lateness(published, settings):
    settings.DELAY_CELERY_TASK_ALLOWLIST = []
    (message,) = published(1, handler="celery_task", target="testapp.record_receipt", late=timedelta(milliseconds=7))
    assert delivery_receive_many(items=[(str(message.id), 0)])[0].result is Result.RETRY
    Endpoint.objects.filter(id=message.endpoint_id).update(handler="none", handler_target="")
    assert delivery_receive_many(items=[(str(message.id), 1)])[0].result is Result.DELIVERED
    message.refresh_from_db()
    assert message.status == Status.DELIVERED and recorded() == {bucket_ms(message.lateness_ms): 1}


def test_a_celery_task_run_again_after_a_crash_is_not_a_second_delivery(versions, endpoint_name):
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v2"], handler=Endpoint.Handler.CELERY_QUEUE)
    row = ScheduledMessage.objects.create(
        id=uuid.uuid4(), endpoint=endpoint, topology=versions["v2"], payload={}, requested_delay_ms=0,
        due_at=timezone.now() - timedelta(milliseconds=20), status=Status.PUBLISHED,
        created_at=timezone.now() - timedelta(hours=1))
    assert celery_task_claim(message_id=str(row.id), redelivered=False) is True
    assert celery_task_claim(message_id=str(row.id), redelivered=True) is True  # runs again, as Celery would
    row.refresh_from_db()
    assert recorded() == {bucket_ms(row.lateness_ms): 1}


def test_old_minutes_are_dropped_by_a_later_write(published, monkeypatch):
    stale = DeliveryMinute.objects.create(minute=timezone.now() - timedelta(days=3), team_id=default_team_id(), shard=0,
                                          bucket_ms=1, deliveries=1, lateness_max_ms=1)
    monkeypatch.setattr("scheduling.delivery.minutes._pruned_at", [-1e9])
    (row,) = published(1)
    delivery_receive_many(items=[(str(row.id), 0)])
    assert not DeliveryMinute.objects.filter(pk=stale.pk).exists() and sum(recorded().values()) == 1


def test_rows_without_a_lateness_are_skipped():
    delivery_minute_record(messages=[ScheduledMessage(delivered_at=None, lateness_ms=None)])
    assert not DeliveryMinute.objects.exists()

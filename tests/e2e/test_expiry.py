"""Expiry for real (issue 49): a worker's delivery loop, a webhook endpoint limited to 1 call a
second, three messages due at the same moment and a fourth due just after them that expires 1.2 s
after its due time. The limit holds the fourth back past its expiry: the receiver never sees it
and it ends expired, while the three beside it are each called once."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from harness.recording_server import RecordingServer
from harness.waiting import wait_until
from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status


def test_a_message_held_back_past_its_expiry_is_never_handed_over(platform, worker, endpoint_name, create_endpoint,
                                                                   schedule_bulk):
    with RecordingServer() as server:
        create_endpoint(handler="webhook", handler_target=server.url, max_deliveries_per_second=1)
        due = timezone.now() + timedelta(seconds=3)
        bulk = [{"endpoint": endpoint_name, "payload": {"n": n}, "deliver_at": due.isoformat()} for n in range(3)]
        # due 0.2 s after them: the three took the first three slots (1 a second) before it arrives
        bulk.append({"endpoint": endpoint_name, "payload": {"n": "expiring"},
                     "deliver_at": (due + timedelta(milliseconds=200)).isoformat(), "expire_after_seconds": 1.2})
        ids = schedule_bulk(bulk)
        rows = ScheduledMessage.objects.filter(id__in=ids)
        wait_until(lambda: rows.filter(status__in=[Status.DELIVERED, Status.EXPIRED]).count() == 4, 60, 0.5,
                   "every message delivered or expired")
        called = [r["headers"]["X-Delay-Message-Id"] for r in server.requests]

    statuses = dict(rows.values_list("id", "status"))
    assert [statuses[uuid.UUID(i)] for i in ids] == [Status.DELIVERED] * 3 + [Status.EXPIRED]
    assert called.count(ids[3]) == 0  # never handed over
    assert sorted(called) == sorted(ids[:3])  # the others once each
    expired = rows.get(id=ids[3])
    assert expired.delivered_at is None and expired.finished_at >= expired.expires_at

"""Bulk actions for real: messages in the cascade, a cancel by filter through the API, the worker
delivering the rest. Exactly the matching set is cancelled (and the dry run counted it), none of
them reaches its handler, and every other message is delivered once."""

from datetime import datetime

import pytest

from harness.celery_worker import celery_drained
from harness.testapp.models import Receipt
from harness.waiting import wait_until
from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status


def test_bulk_cancel_by_filter_cancels_exactly_the_matching_set(api, platform, worker, endpoint_name):
    names = [f"{endpoint_name}-a", f"{endpoint_name}-b"]
    for name in names:
        created = api.post("/api/endpoints/", {"name": name, "handler": "celery_task",
                                               "handler_target": "testapp.record_receipt"}, format="json")
        assert created.status_code == 201, created.content
    bulk = [{"endpoint": name, "payload": {"n": n}, "delay_seconds": 3 + n / 4} for name in names for n in range(12)]
    response = api.post("/api/messages/bulk/", {"messages": bulk}, format="json")
    assert response.status_code == 201
    rows = {m["id"]: m for m in response.json()["messages"]}
    due_a = sorted(datetime.fromisoformat(m["due_at"].replace("Z", "+00:00")) for m in rows.values()
                   if m["endpoint"] == names[0])
    cutoff = due_a[6] + (due_a[7] - due_a[6]) / 2  # a's first 7 due before it (from the times the platform gave)
    expected = {i for i, m in rows.items() if m["endpoint"] == names[0]
                and datetime.fromisoformat(m["due_at"].replace("Z", "+00:00")) < cutoff}
    query = {"endpoint": names[0], "due_before": cutoff.isoformat()}
    dry = api.post("/api/messages/cancel/", {**query, "dry_run": True}, format="json")
    assert dry.status_code == 200 and dry.json() == {"count": len(expected), "exact": True} and len(expected) == 7
    job = api.post("/api/messages/cancel/", query, format="json")
    assert job.status_code == 202 and job.json()["count"] == 7  # the worker runs it
    wait_until(lambda: api.get(job["Location"]).json()["state"] == "done", 15, 0.1, "the bulk job done")
    assert api.get(job["Location"]).json()["done"] == 7

    others = set(rows) - expected
    wait_until(lambda: ScheduledMessage.objects.filter(id__in=others, status=Status.DELIVERED).count() == len(others),
               30, 0.2, "the other 17 delivered")
    wait_until(lambda: Receipt.objects.count() >= len(others), 15, 0.2, "their handlers")
    celery_drained()
    statuses = dict(ScheduledMessage.objects.filter(id__in=rows).values_list("id", "status"))
    assert {str(i) for i, s in statuses.items() if s == Status.CANCELLED} == expected
    assert sorted(Receipt.objects.values_list("message_id", flat=True)) == sorted(others)  # once each, none cancelled

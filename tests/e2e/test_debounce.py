"""Debounce for real: the API -> the cascade -> a worker's delivery loop -> a Celery task that
writes one Receipt per call. Trailing: five edits 0.3 s apart make one call, with the last payload,
and the copies of the four it replaced are dropped on arrival; the cap makes the one delivered due
at the first's time + max_seconds; leading: the first is delivered and the rest never are."""

import time
from datetime import timedelta

import pytest

from harness.celery_worker import celery_drained
from harness.testapp.models import Receipt
from harness.waiting import wait_until
from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.e2e, pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status


@pytest.fixture
def endpoint(api, platform, worker, endpoint_name):
    created = api.post("/api/endpoints/", {"name": endpoint_name, "handler": "celery_task",
                                           "handler_target": "testapp.record_receipt"}, format="json")
    assert created.status_code == 201, created.content
    return endpoint_name


def send(api, endpoint, n, debounce, pause=0.0):
    response = api.post("/api/messages/", {"endpoint": endpoint, "payload": {"n": n}, "delay_seconds": 0,
                                           "debounce": debounce}, format="json")
    assert response.status_code == 201, response.content
    time.sleep(pause)
    return response.json()["id"]


def settled(ids: list[str]) -> list[ScheduledMessage]:
    """Once the last is delivered and no handler task is left: the rows, in the order sent."""
    wait_until(lambda: ScheduledMessage.objects.filter(pk=ids[-1], status=Status.DELIVERED).exists(), 30, 0.1,
               "the last one delivered")
    celery_drained()
    rows = {str(m.id): m for m in ScheduledMessage.objects.filter(pk__in=ids)}
    return [rows[i] for i in ids]


def calls(ids: list[str]) -> list:
    return list(Receipt.objects.filter(message_id__in=ids).values_list("message_id", "payload"))


def test_trailing_five_edits_make_one_call_with_the_last_payload(api, endpoint):
    debounce = {"key": "doc-1", "seconds": 1, "max_seconds": 10, "mode": "trailing"}
    ids = [send(api, endpoint, n, debounce, pause=0.3) for n in range(5)]
    rows = settled(ids)
    assert [r.status for r in rows] == [Status.SUPERSEDED] * 4 + [Status.DELIVERED]
    assert rows[-1].due_at == rows[-1].created_at + timedelta(seconds=1)  # 1 s after the newest
    time.sleep(1)  # the superseded copies were due before the last: any left would have arrived by now
    assert calls(ids) == [(ids[-1], {"n": 4})]


def test_trailing_is_due_at_the_first_plus_max_seconds_at_the_latest(api, endpoint):
    debounce = {"key": "doc-2", "seconds": 2, "max_seconds": 2, "mode": "trailing"}
    ids = [send(api, endpoint, n, debounce, pause=0.5) for n in range(3)]
    rows = settled(ids)
    first, last = rows[0], rows[-1]
    assert last.status == Status.DELIVERED and last.due_at == first.created_at + timedelta(seconds=2)
    assert last.due_at < last.created_at + timedelta(seconds=2)  # capped: sooner than 2 s after the newest
    assert calls(ids) == [(ids[-1], {"n": 2})]


def test_leading_delivers_the_first_and_supersedes_the_rest(api, endpoint):
    debounce = {"key": "doc-3", "seconds": 3, "mode": "leading"}
    ids = [send(api, endpoint, n, debounce) for n in range(5)]
    rows = settled(ids[:1])
    rows = [rows[0], *ScheduledMessage.objects.filter(pk__in=ids[1:]).order_by("created_at")]
    assert [r.status for r in rows] == [Status.DELIVERED] + [Status.SUPERSEDED] * 4
    assert calls(ids) == [(ids[0], {"n": 0})]

"""The reconciliation after a restore against the live broker: every native row still published
past the cutoff gets a copy through its version's delivery exchange (any handler; a row waiting
for a handler retry, that retry's copy), nothing else does; a dry run only counts."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.messages import wire
from scheduling.models import ScheduledMessage
from scheduling.moves.restore import message_reconcile_after_restore
from tests.topology.helpers import get, wait_get

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
Status = ScheduledMessage.Status
CUTOFF = timedelta(seconds=30)


@pytest.fixture
def endpoint(bound_endpoint):
    return bound_endpoint("v3")


def row(endpoint, overdue_s: float, **fields) -> ScheduledMessage:
    now = timezone.now()
    return ScheduledMessage.objects.create(
        endpoint=endpoint, topology=endpoint.topology, payload={"n": 1}, published_at=now - timedelta(hours=1),
        due_at=now - timedelta(seconds=overdue_s), requested_delay_ms=5000, **{"status": Status.PUBLISHED, **fields})


def reconcile(**kwargs):
    return message_reconcile_after_restore(overdue_after=CUTOFF, **kwargs)


def drained(amqp, queue: str) -> list:
    got = []
    while (message := get(amqp, queue)) is not None:
        got.append(message)
    return got


def test_rows_published_long_past_their_due_time_get_a_copy_each(endpoint, amqp):
    overdue = [row(endpoint, 40 + n) for n in range(3)]
    retrying = row(endpoint, 50, attempts=2)
    others = [row(endpoint, 5), row(endpoint, -60), row(endpoint, 40, status=Status.DELIVERED),
              row(endpoint, 40, status=Status.PENDING), row(endpoint, 40, status=Status.CANCELLED),
              row(endpoint, 40, delivery_mode="timeout_manager")]
    progress = []
    result = reconcile(batch=2, progress=lambda done, total: progress.append((done, total)))
    assert (result.overdue, result.republished, result.unconfirmed, result.skipped) == (4, 4, 0, 0)
    assert (result.waiting, result.pending) == (2, 1)
    assert progress[-1] == (4, 4) and len(progress) == 2
    first, _ = wait_get(amqp, endpoint.name, timeout=3)
    copies = [first, *drained(amqp, endpoint.name)]
    by_id = {c.headers[wire.H_MESSAGE_ID]: c for c in copies}
    assert set(by_id) == {str(r.id) for r in [*overdue, retrying]} and len(copies) == 4
    assert json.loads(by_id[str(retrying.id)].body)[1] == {"attempt": 2}  # the retry it waits for
    assert json.loads(by_id[str(overdue[0].id)].body)[1] == {}
    for r in [*overdue, retrying, *others]:
        assert ScheduledMessage.objects.get(pk=r.pk).status == r.status  # the copy that arrives decides


def test_a_dry_run_counts_and_publishes_nothing(endpoint, amqp):
    row(endpoint, 40)
    result = reconcile(dry_run=True)
    assert (result.overdue, result.republished) == (1, 0) and result.oldest_due is not None
    assert get(amqp, endpoint.name) is None


def test_a_row_whose_webhook_call_is_out_is_left_to_it(endpoint, amqp):
    row(endpoint, 40, call_lease_until=timezone.now() + timedelta(seconds=30))
    result = reconcile()
    assert (result.overdue, result.republished, result.skipped) == (1, 0, 1)
    assert get(amqp, endpoint.name) is None


def test_the_broker_s_depths_are_read_when_asked(endpoint, amqp):
    result = reconcile(dry_run=True, compare_broker=True)
    assert result.broker_problem == "" and result.broker_messages is not None and result.broker_messages >= 0

"""The delivery loop's writer thread (scheduling/delivery/recorder.py) against the real database:
ended calls written on its own connection and handed back once; the database gone mid-run (its
backend terminated) and the results written when it is back, none lost, none written twice; a
result the database refuses written alone and handed back unrecorded, the others kept."""

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from scheduling.delivery.recorder import Recorder
from scheduling.delivery.services import Result
from scheduling.delivery.webhook_calls import CallToken, webhook_call_take
from scheduling.delivery.webhooks import Call, CallResult
from scheduling.models import AttemptOutcome, Endpoint, MessageAttempt, ScheduledMessage

pytestmark = pytest.mark.django_db(transaction=True)
Status = ScheduledMessage.Status


@pytest.fixture
def taken(versions, endpoint_name):
    """``n`` due rows taken for their calls (leased), as the loop takes them."""
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"],
                                       handler="webhook", handler_target="https://example.com/hook",
                                       webhook_secret="s" * 32)

    def take(n):
        now = timezone.now()
        rows = ScheduledMessage.objects.bulk_create([
            ScheduledMessage(endpoint=endpoint, topology=versions["v3"], payload={"n": i}, requested_delay_ms=0,
                             due_at=now - timedelta(milliseconds=20), status=Status.PUBLISHED) for i in range(n)])
        got, _ = webhook_call_take(items=[(str(r.id), 0, None, None) for r in rows],
                                   deadlines={str(r.id): 5.0 for r in rows})
        return list(got.values())

    return take


def results(rows, status=200):
    out = []
    for row in rows:
        call = Call(row.message_id, row.endpoint_id, 1, "https://example.com/hook", b"{}", {}, 5.0, (), 8,
                    token=CallToken(held=None, row=row, session=1, slot=None))
        out.append(CallResult(call, time.time(), 3, AttemptOutcome.OK, status, "ok"))
    return out


@pytest.fixture
def recorder():
    started = Recorder(by="test-worker")
    started.start()
    yield started
    started.stop()
    assert not started.is_alive()


def written(recorder, timeout=30.0):
    """Every write handed back until ``timeout``'s end or the first pause in them."""
    out, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        if not recorder.done.empty():
            out.append(recorder.done.get())
            end = min(end, time.monotonic() + 0.5)  # a second write of the same results would come soon
        else:
            time.sleep(0.02)
    return out


def test_results_are_written_on_the_recorder_s_connection_and_handed_back_once(recorder, taken):
    rows = taken(20)
    recorder.submit(results(rows))
    (one,) = written(recorder, timeout=10)
    assert {r.call.message_id for r in one.results} == {r.message_id for r in rows} and one.unrecorded == []
    assert {o.result for o in one.recorded.outcomes.values()} == {Result.DELIVERED}
    assert ScheduledMessage.objects.filter(status=Status.DELIVERED).count() == 20
    assert MessageAttempt.objects.filter(worker="test-worker").count() == 20


def test_results_wait_for_a_database_that_went_away_and_none_is_lost_or_written_twice(recorder, taken):
    recorder.submit(results(taken(1)))
    assert len(written(recorder, timeout=10)) == 1  # the recorder's connection is open now
    with connection.cursor() as cursor:  # its backend goes, as in a database restart
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        assert cursor.fetchone() is not None
    rows = taken(30)
    recorder.submit(results(rows))
    writes = written(recorder, timeout=15)
    assert len(writes) == 1, [len(w.results) for w in writes]  # written once, after the failed try
    assert {r.call.message_id for r in writes[0].results} == {r.message_id for r in rows}
    assert ScheduledMessage.objects.filter(id__in=[r.message_id for r in rows], status=Status.DELIVERED).count() == 30
    assert MessageAttempt.objects.filter(message_id__in=[r.message_id for r in rows]).count() == 30


def test_a_result_the_database_refuses_comes_back_unrecorded_and_the_others_are_kept(recorder, taken):
    rows = taken(5)
    batch = results(rows)
    batch[2].status_code = 2**40  # out of the column's range: the database refuses the batch
    recorder.submit(batch)
    (one,) = written(recorder, timeout=10)
    assert [r.call.message_id for r in one.unrecorded] == [rows[2].message_id]
    assert {r.call.message_id for r in one.results} == {r.message_id for r in rows} - {rows[2].message_id}
    refused = ScheduledMessage.objects.get(id=rows[2].message_id)
    assert refused.status == Status.PUBLISHED and refused.call_lease_until is not None  # held under its lease
    assert ScheduledMessage.objects.filter(status=Status.DELIVERED).count() == 4

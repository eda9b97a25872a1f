"""Debounce on the real database (messages/debounce.py through message_schedule): trailing
replaces the waiting message and carries its window's cap, leading supersedes within its window,
keys are per endpoint and team, and two transactions with one key leave one message waiting."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from scheduling.core.lifecycle import IN_FLIGHT
from scheduling.delivery.services import Result, delivery_receive
from scheduling.messages.services import message_schedule, message_schedule_many
from scheduling.models import CascadeCopy, Endpoint, ScheduledMessage
from scheduling.observability import metrics
from tests.conftest import team_named

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status
S = timedelta(seconds=1)


@pytest.fixture
def endpoint(endpoint_of):
    return endpoint_of("v2")


def trailing(key="doc-1", seconds=5, max_seconds=60):
    return {"key": key, "seconds": seconds, "max_seconds": max_seconds, "mode": "trailing"}


def leading(key="doc-1", seconds=5):
    return {"key": key, "seconds": seconds, "mode": "leading"}


def send(endpoint, debounce, n=1, delay=0):
    return message_schedule(endpoint=endpoint, payload={"n": n}, delay=delay, debounce=debounce)


def waiting(endpoint, key="doc-1"):
    return list(ScheduledMessage.objects.filter(endpoint=endpoint, debounce_key=key, status__in=["pending",
                                                                                              "published"]))


def test_trailing_replaces_the_waiting_message_and_is_due_seconds_after_the_newest(endpoint):
    first = send(endpoint, trailing(), n=1)
    assert first.due_at == first.created_at + 5 * S
    assert first.debounce_until == first.created_at + 60 * S
    second = send(endpoint, trailing(), n=2)
    first.refresh_from_db()
    assert first.status == Status.SUPERSEDED and first.finished_at is not None
    assert waiting(endpoint) == [second]
    assert second.due_at == second.created_at + 5 * S
    assert second.debounce_until == first.debounce_until  # the window's cap travels to the newest


def test_trailing_is_never_due_past_the_cap_of_the_first(endpoint):
    first = send(endpoint, trailing(seconds=2, max_seconds=2))
    row = ScheduledMessage.objects.get(pk=first.pk)
    # the first was accepted 1.5 s ago: the cap (first + 2 s) is before the newest + 2 s
    ScheduledMessage.objects.filter(pk=row.pk).update(debounce_until=timezone.now() + timedelta(milliseconds=500))
    cap = ScheduledMessage.objects.get(pk=row.pk).debounce_until
    newest = send(endpoint, trailing(seconds=2, max_seconds=2), n=2)
    assert newest.due_at == cap < newest.created_at + 2 * S


def test_a_published_copy_in_the_cascade_counts_until_it_leaves(endpoint):
    first = send(endpoint, trailing())
    # published (relay_claim_new writes it so, unless the relay paused after a broker refusal): in the cascade
    ScheduledMessage.objects.filter(pk=first.pk).update(status=Status.PUBLISHED)
    send(endpoint, trailing(), n=2)
    (copy,) = CascadeCopy.objects.filter(message_id=first.pk)
    assert copy.until == first.due_at and copy.team_id == endpoint.team_id


def test_leading_delivers_the_first_and_supersedes_the_others_within_its_window(endpoint):
    first = send(endpoint, leading(), n=1)
    assert first.status in IN_FLIGHT and first.due_at == first.created_at  # at its own time
    others = [send(endpoint, leading(), n=n) for n in (2, 3)]
    assert [m.status for m in others] == [Status.SUPERSEDED] * 2
    assert not others[0].published_at and others[0].debounce_until == first.debounce_until
    first.refresh_from_db()
    assert first.status in IN_FLIGHT
    ScheduledMessage.objects.filter(debounce_key="doc-1").update(debounce_until=timezone.now())  # the window ends
    assert send(endpoint, leading(), n=4).status in IN_FLIGHT  # a new window


def test_a_delivered_one_is_not_replaced_the_newest_starts_a_new_window(endpoint):
    first = send(endpoint, trailing())
    ScheduledMessage.objects.filter(pk=first.pk).update(status=Status.DELIVERED)
    second = send(endpoint, trailing(), n=2)
    assert ScheduledMessage.objects.get(pk=first.pk).status == Status.DELIVERED
    assert second.debounce_until == second.created_at + 60 * S  # its own cap


def test_a_message_whose_webhook_call_is_out_is_not_replaced(endpoint):
    first = send(endpoint, trailing())
    ScheduledMessage.objects.filter(pk=first.pk).update(call_lease_until=timezone.now() + 30 * S)
    send(endpoint, trailing(), n=2)
    assert ScheduledMessage.objects.get(pk=first.pk).status in IN_FLIGHT


def test_keys_are_per_endpoint_per_team_and_per_key(endpoint, endpoint_name, versions):
    mine = send(endpoint, trailing())
    other_team = Endpoint.objects.create(team=team_named("other"), name=endpoint_name, queue=f"other--{endpoint_name}",
                                         topology=versions["v2"])
    other_endpoint = Endpoint.objects.create(name=f"{endpoint_name}-b", queue=f"{endpoint_name}-b",
                                             topology=versions["v2"])
    send(other_team, trailing())
    send(other_endpoint, trailing())
    send(endpoint, trailing(key="doc-2"))
    assert ScheduledMessage.objects.get(pk=mine.pk).status in IN_FLIGHT
    assert ScheduledMessage.objects.filter(status=Status.SUPERSEDED).count() == 0


def test_within_one_bulk_the_last_of_a_key_stays(endpoint):
    results = message_schedule_many(items=[{"endpoint": endpoint, "payload": {"n": n}, "delay": 0,
                                            "debounce": trailing()} for n in range(3)])
    assert [r.message.status for r in results][:2] == [Status.SUPERSEDED, Status.SUPERSEDED]
    assert results[2].message.status in IN_FLIGHT
    assert [m.payload for m in waiting(endpoint)] == [{"n": 2}]
    assert ScheduledMessage.objects.filter(status=Status.SUPERSEDED).count() == 2


def test_supersessions_are_counted(endpoint, django_capture_on_commit_callbacks):
    before = _count(metrics.MESSAGES_SUPERSEDED)
    with django_capture_on_commit_callbacks(execute=True):  # counted at the commit
        for n in range(3):
            send(endpoint, trailing(), n=n)
    assert _count(metrics.MESSAGES_SUPERSEDED) - before == 2


def _count(counter) -> float:
    return sum(s.value for m in counter.collect() for s in m.samples if s.name.endswith("_total"))


def test_a_bad_debounce_is_refused_naming_its_field(endpoint):
    with pytest.raises(ValidationError) as caught:
        send(endpoint, {"key": "k" * 201, "seconds": 0, "max_seconds": 10 ** 9})
    assert set(caught.value.message_dict) == {"debounce.key", "debounce.seconds", "debounce.max_seconds"}
    assert not ScheduledMessage.objects.exists()


def test_a_superseded_copy_that_arrives_is_dropped_never_delivered(endpoint):
    first = send(endpoint, trailing())
    send(endpoint, trailing(), n=2)
    ScheduledMessage.objects.filter(pk=first.pk).update(due_at=timezone.now() - S)  # its copy arrives now
    outcome = delivery_receive(message_id=str(first.pk), by="test")
    assert outcome.result is Result.SUPERSEDED
    row = ScheduledMessage.objects.get(pk=first.pk)
    assert row.status == Status.SUPERSEDED and row.delivered_at is None


@pytest.mark.django_db(transaction=True)
def test_two_transactions_with_one_key_leave_one_message_waiting(endpoint, two_transactions):
    """Each on its own connection: the first has scheduled (not committed) when the second
    schedules with the same key. The second waits for the first's commit on the key's lock, then
    replaces it; without the lock neither sees the other and both stay waiting."""
    raised = two_transactions(lambda: send(endpoint, trailing(), n=1), lambda: send(endpoint, trailing(), n=2),
                              waiting=_waiting_on_a_lock)
    assert not raised
    assert [m.payload for m in waiting(endpoint)] == [{"n": 2}]
    assert ScheduledMessage.objects.filter(status=Status.SUPERSEDED).count() == 1


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return cursor.fetchone()[0] > 0

"""The in-flight quotas of teams/quotas.py on the real database: one check under the team's lock
(two transactions at the quota less one: one passes, the other is refused), the bytes of
payloads in flight, and the copies a cancel or a reschedule leaves in the cascade, counted until
their old due time."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from scheduling.core.caller import Caller
from scheduling.core.errors import QuotaExceeded
from scheduling.messages.services import message_cancel, message_reschedule, message_schedule_many
from scheduling.models import CascadeCopy, Endpoint, ScheduledMessage
from scheduling.teams.quotas import TEAM_LOCK_BASE, team_forget_counts, team_in_flight
from scheduling.teams.services import team_create, team_update

Status = ScheduledMessage.Status


@pytest.fixture
def team():
    return team_create(name="billing")


@pytest.fixture
def endpoint(team, versions):
    return Endpoint.objects.create(team=team, name="e", queue="billing--e", topology=versions["v3"])


@pytest.fixture
def caller(team):
    return Caller(name="k", roles={team.pk: "admin"}, person=False)


def schedule(caller, n=1, payload=0, delay=600):
    return message_schedule_many(items=[{"endpoint": "e", "payload": payload, "delay": delay} for _ in range(n)],
                                 caller=caller)


def in_flight(team):
    with transaction.atomic():
        return team_in_flight(team=team)


def published(endpoint, n, due_in=timedelta(hours=1)):
    now = timezone.now()
    return ScheduledMessage.objects.bulk_create([
        ScheduledMessage(endpoint=endpoint, topology=endpoint.topology, payload={"n": i}, due_at=now + due_in,
                         requested_delay_ms=3_600_000, status=Status.PUBLISHED, published_at=now, payload_bytes=7)
        for i in range(n)])


@pytest.mark.django_db
def test_the_bytes_of_payloads_in_flight_have_a_quota(team, endpoint, caller):
    team_update(team=team, max_in_flight_bytes=100)
    schedule(caller, payload="x" * 58)  # 60 bytes of JSON
    refusal = r"team billing has 60 bytes in flight of its quota of 100 \(bytes_in_flight; the platform's default"
    with pytest.raises(QuotaExceeded, match=refusal + " is DELAY_TEAM_MAX_IN_FLIGHT_BYTES"):
        schedule(caller, payload="x" * 58)
    assert ScheduledMessage.objects.filter(endpoint=endpoint).count() == 1
    schedule(caller, payload="x" * 38)  # 40 bytes: exactly the quota
    assert in_flight(team).bytes == 100


@pytest.mark.django_db
def test_a_cancelled_message_s_copy_counts_until_its_old_due_time(team, endpoint, caller):
    team_update(team=team, max_in_flight=2)
    first, _ = published(endpoint, 2)
    message_cancel(message_id=first.pk)
    assert in_flight(team).messages == 2  # one in flight, and the cancelled one's copy in the cascade
    with pytest.raises(QuotaExceeded, match="team billing has 2 messages in flight of its quota of 2"):
        schedule(caller)
    (copy,) = CascadeCopy.objects.filter(team=team)
    assert copy.message_id == first.pk and copy.until == first.due_at and copy.payload_bytes == 7
    CascadeCopy.objects.filter(pk=copy.pk).update(until=timezone.now() - timedelta(seconds=1))  # it has left
    schedule(caller)
    assert in_flight(team).messages == 2


@pytest.mark.django_db
def test_a_pending_message_or_one_due_already_leaves_no_copy(team, endpoint):
    pending = ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, payload=1,
                                              due_at=timezone.now() + timedelta(hours=1), requested_delay_ms=1)
    (overdue,) = published(endpoint, 1, due_in=timedelta(seconds=-5))
    message_cancel(message_id=pending.pk)
    message_cancel(message_id=overdue.pk)
    assert not CascadeCopy.objects.exists() and in_flight(team).messages == 0


@pytest.mark.django_db
def test_a_rescheduled_message_s_old_copy_counts_and_a_reschedule_over_the_quota_is_refused(team, endpoint, caller):
    team_update(team=team, max_in_flight=3)
    first, second = published(endpoint, 2)
    message_reschedule(message_id=first.pk, delay=60)  # its copy for the old time stays: 3 in flight
    assert in_flight(team).messages == 3
    with pytest.raises(QuotaExceeded, match="team billing has 3 messages in flight of its quota of 3"):
        message_reschedule(message_id=second.pk, delay=60)
    second.refresh_from_db()
    assert second.status == Status.PUBLISHED and not second.due_history  # unchanged
    with pytest.raises(QuotaExceeded):
        schedule(caller)


@pytest.mark.django_db(transaction=True)
def test_two_transactions_at_the_quota_less_one_cannot_both_pass(team, endpoint, caller, two_transactions):
    """Two writers of one team, each in its own transaction on its own connection: the first has
    scheduled its message (not committed yet) when the second checks. The second waits for the
    first's commit on the team's lock, counts it, and is refused; without the lock both pass."""
    team_update(team=team, max_in_flight=3)
    schedule(caller, n=2)

    def second():
        team_forget_counts()  # as another process would: nothing of the first's cached
        schedule(caller)

    raised = two_transactions(lambda: schedule(caller), second, waiting=lambda: _waiting_on_the_lock(team))
    assert list(raised) == ["second"] and isinstance(raised["second"], QuotaExceeded)  # the first is scheduled
    assert str(raised["second"]).startswith("team billing has 3 messages in flight of its quota of 3")
    assert ScheduledMessage.objects.filter(endpoint=endpoint, status__in=["pending", "published"]).count() == 3


def _waiting_on_the_lock(team) -> bool:
    """Another session waits for the team's advisory lock (pg_locks: not granted)."""
    key = TEAM_LOCK_BASE | team.pk
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                       "AND classid = %s AND objid = %s AND objsubid = 1", [key >> 32, key & 0xFFFFFFFF])
        return cursor.fetchone()[0] > 0


def _holding_the_lock(team) -> bool:
    """This session holds the team's advisory lock (pg_locks: granted to this backend)."""
    key = TEAM_LOCK_BASE | team.pk
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = "
                       "pg_backend_pid() AND classid = %s AND objid = %s AND objsubid = 1",
                       [key >> 32, key & 0xFFFFFFFF])
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db
def test_far_below_its_quota_a_team_is_admitted_without_the_lock_and_near_it_with_it(team, endpoint, caller):
    """An exact count is as long as what the team has in flight, and under the lock each request of
    the team would wait for it: far below the quota (by more than a tenth of it and 10,000) a count
    at most a second old admits without the lock; within that margin the lock and an exact count."""
    team_update(team=team, max_in_flight=20_000)  # exact within 10,000 of it: from 10,000
    team_forget_counts()
    with transaction.atomic():
        schedule(caller, n=5)
        assert not _holding_the_lock(team)
    published(endpoint, 9_990 - 5)  # as another process would have: this one's count is a second old
    team_forget_counts()
    with transaction.atomic():
        schedule(caller, n=10)  # 9,990 + 10: the last of the far side
        assert not _holding_the_lock(team)
    with transaction.atomic():
        schedule(caller)  # one more is within the margin: counted exactly, under the lock
        assert _holding_the_lock(team)
    assert in_flight(team).messages == 10_001


@pytest.mark.django_db
def test_what_the_recent_count_admitted_counts_until_the_next_recount(team, endpoint, caller):
    """What this process admitted since its count is added to it: a burst of requests within one
    second reaches the margin and is then counted exactly, never admitted past it on a stale count."""
    team_update(team=team, max_in_flight=10_020)  # a margin of 10,000: 20 far below
    team_forget_counts()
    for _ in range(4):
        with transaction.atomic():
            schedule(caller, n=5)
            assert not _holding_the_lock(team)
    with transaction.atomic():
        schedule(caller)
        assert _holding_the_lock(team)  # 21: past the 20 the recent count may admit


def test_a_quota_warning_is_logged_at_most_once_a_minute_per_team_and_quota():
    from scheduling.teams.quotas import QuotaWarnings

    warnings = QuotaWarnings()  # the process's is quota_warnings; a fresh one sees no earlier warning
    assert warnings.due((1, "in_flight"), 1000.0)
    assert not warnings.due((1, "in_flight"), 1059.9)
    assert warnings.due((1, "payload_bytes"), 1059.9) and warnings.due((2, "in_flight"), 1059.9)
    assert warnings.due((1, "in_flight"), 1060.0)

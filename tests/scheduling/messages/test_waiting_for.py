"""What a waiting message waits for (messages/selectors.message_list_waiting_for, issue 49) against the
real database: its key's live holder, else the first open message of its key due before it; nothing
for messages that do not wait; only the same endpoint's and key's messages; one statement for a page,
none when nothing on it waits. And the waiting count behind delay_messages_waiting."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.messages.selectors import message_count_waiting, message_list_waiting_for
from scheduling.models import Endpoint, OrderingTurn, ScheduledMessage

Status = ScheduledMessage.Status
pytestmark = pytest.mark.django_db


@pytest.fixture
def make(versions, endpoint_name):
    now = timezone.now()

    def make(*, key="k", due_s=0, status=Status.WAITING, endpoint="a", created_s=0):
        target, _ = Endpoint.objects.get_or_create(
            name=f"{endpoint_name}-{endpoint}", defaults=dict(queue=f"{endpoint_name}-{endpoint}",
                                                               topology=versions["v3"]))
        return ScheduledMessage.objects.create(
            endpoint=target, topology=versions["v3"], payload=1, due_at=now + timedelta(seconds=due_s),
            requested_delay_ms=0, status=status, created_at=now - timedelta(hours=1) + timedelta(seconds=created_s),
            ordering_key=key, waiting_since=now if status == Status.WAITING else None)

    return make


def waits_for(*messages):
    return message_list_waiting_for(messages=list(messages))


def test_a_waiting_message_waits_for_the_first_open_one_of_its_key_due_before_it(make):
    first = make(due_s=-3, status=Status.PUBLISHED)
    second, third = make(due_s=-2), make(due_s=-1)
    make(due_s=-9, status=Status.DELIVERED)  # ended: no obstacle
    make(due_s=-9, key="other", status=Status.PUBLISHED)  # another key
    make(due_s=-9, endpoint="b", status=Status.PUBLISHED)  # the same key on another endpoint
    assert waits_for(first, second, third) == {str(second.id): str(first.id), str(third.id): str(first.id)}


def test_ties_in_due_time_go_by_creation(make):
    older = make(due_s=-1, status=Status.PUBLISHED, created_s=0)
    newer = make(due_s=-1, created_s=1)
    ScheduledMessage.objects.filter(id=newer.id).update(due_at=older.due_at)
    newer.due_at = older.due_at
    assert waits_for(newer) == {str(newer.id): str(older.id)}


def test_the_keys_live_holder_comes_first_and_a_lapsed_one_not(make):
    head = make(due_s=-3, status=Status.PUBLISHED)
    waiting = make(due_s=-1)
    holder = make(due_s=-5, status=Status.CANCELLED)  # cancelled while its call was out: still the holder
    turn = OrderingTurn.objects.create(endpoint=waiting.endpoint, key="k", holder_id=holder.id,
                                       holder_until=timezone.now() + timedelta(minutes=1))
    assert waits_for(waiting) == {str(waiting.id): str(holder.id)}
    OrderingTurn.objects.filter(pk=turn.pk).update(holder_until=timezone.now() - timedelta(seconds=1))
    assert waits_for(waiting) == {str(waiting.id): str(head.id)}


def test_a_message_holding_its_own_key_is_not_shown_waiting_for_itself(make):
    waiting = make(due_s=-1)
    OrderingTurn.objects.create(endpoint=waiting.endpoint, key="k", holder_id=waiting.id,
                                holder_until=timezone.now() + timedelta(minutes=1))
    assert waits_for(waiting) == {str(waiting.id): None}


def test_a_waiting_message_with_nothing_before_it_waits_for_nothing(make):
    alone = make(due_s=-1)
    make(due_s=5, status=Status.PUBLISHED)  # due after it: not what it waits for
    assert waits_for(alone) == {str(alone.id): None}


def test_messages_that_do_not_wait_are_left_out_without_a_statement(make):
    rows = [make(due_s=-1, status=status) for status in (Status.PENDING, Status.PUBLISHED, Status.DELIVERED)]
    rows.append(make(key=None, status=Status.PUBLISHED))
    with CaptureQueriesContext(connection) as queries:
        assert waits_for(*rows) == {}
    assert len(queries.captured_queries) == 0


def test_a_page_of_waiting_messages_is_one_statement(make):
    heads = {key: make(key=key, due_s=-9, status=Status.PUBLISHED) for key in ("k1", "k2", "k3")}
    waiting = [make(key=key, due_s=-n) for key in heads for n in range(1, 6)]
    with CaptureQueriesContext(connection) as queries:
        answers = waits_for(*waiting)
    assert len(queries.captured_queries) == 1
    assert answers == {str(m.id): str(heads[m.ordering_key].id) for m in waiting} and len(answers) == 15


def test_the_waiting_count_is_per_team_and_endpoint_that_has_some(make):
    rows = {endpoint: [make(endpoint=endpoint, due_s=-1) for _ in range(n)] for endpoint, n in (("a", 3), ("b", 1))}
    make(endpoint="c", status=Status.PUBLISHED)  # nothing waiting: not listed
    expected = {(rows[e][0].endpoint.team.name, rows[e][0].endpoint.name): len(rows[e]) for e in rows}
    assert message_count_waiting() == expected

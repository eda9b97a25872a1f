"""subscription_create/delete, event_publish, event_cancel on the real database (rows only: the
on-commit publishes never fire in these transactional tests): matching per team, one message per
subscribed endpoint, all or nothing, the quota counting each message, idempotency, the counter."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from scheduling.audit import actions
from scheduling.audit.context import AuditContext, audited
from scheduling.core.caller import Caller
from scheduling.core.errors import Forbidden, NotFound, QuotaExceeded
from scheduling.events.services import (
    event_cancel,
    event_get,
    event_publish,
    subscription_create,
    subscription_delete,
)
from scheduling.models import AuditEvent, Endpoint, Event, ScheduledMessage, Subscription, Team
from scheduling.observability import metrics

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


@pytest.fixture
def team(versions):
    return Team.objects.create(name="billing")


@pytest.fixture
def other(versions):
    return Team.objects.create(name="shipping")


def endpoint(team, name, versions, **fields):
    return Endpoint.objects.create(team=team, name=name, queue=f"{team.name}--{name}", topology=versions["v3"],
                                   **fields)


def member(*teams, scopes=None):
    kwargs = {"scopes": frozenset(scopes)} if scopes else {}
    return Caller(name="m", user_id=1, roles={t.pk: "member" for t in teams}, **kwargs)


def test_one_message_per_matching_subscription_of_the_team_only(team, other, versions):
    ledger, mailer, analytics = (endpoint(team, n, versions) for n in ("ledger", "mailer", "analytics"))
    theirs = endpoint(other, "ledger", versions)
    subscription_create(team=team, topic="invoice.paid", endpoint="ledger")
    subscription_create(team=team, topic="invoice.*", endpoint="mailer", filter={"customer.country": ["FR", "DE"]})
    subscription_create(team=team, topic="order.#", endpoint="analytics")
    subscription_create(team=other, topic="#", endpoint="ledger")
    published = event_publish(team=team, topic="invoice.paid", payload={"customer": {"country": "FR"}},
                              delay=30, caller=member(team))
    assert published.created
    assert sorted(m.endpoint.name for m in published.messages) == ["ledger", "mailer"]
    rows = ScheduledMessage.objects.filter(event=published.event)
    assert {r.endpoint_id for r in rows} == {ledger.pk, mailer.pk}
    assert {r.due_at for r in rows} == {published.event.due_at}
    assert not ScheduledMessage.objects.filter(endpoint__in=[analytics, theirs]).exists()
    assert Event.objects.get().message_count == 2
    filtered = event_publish(team=team, topic="invoice.paid", payload={"customer": {"country": "US"}}, delay=30)
    assert [m.endpoint.name for m in filtered.messages] == ["ledger"]


def test_an_endpoint_with_several_matching_subscriptions_gets_one_message(team, versions):
    endpoint(team, "ledger", versions)
    subscription_create(team=team, topic="invoice.paid", endpoint="ledger")
    subscription_create(team=team, topic="invoice.#", endpoint="ledger")
    assert len(event_publish(team=team, topic="invoice.paid", payload={}, delay=5).messages) == 1


def test_an_event_matching_nothing_is_kept_and_counted(team, versions):
    before = metrics.EVENTS.labels(team.name, "no")._value.get()
    with pytest.MonkeyPatch.context() as patch:  # on_commit runs at once here (no outer transaction to wait for)
        patch.setattr("django.db.transaction.on_commit", lambda f, *a, **k: f())
        published = event_publish(team=team, topic="nobody.listens", payload={"a": 1}, delay=1)
    assert published.created and published.messages == []
    assert Event.objects.get(pk=published.event.pk).message_count == 0
    assert metrics.EVENTS.labels(team.name, "no")._value.get() == before + 1


def test_the_same_idempotency_key_answers_the_same_event(team, other, versions):
    endpoint(team, "ledger", versions)
    endpoint(other, "ledger", versions)
    subscription_create(team=team, topic="#", endpoint="ledger")
    first = event_publish(team=team, topic="a.b", payload={}, delay=5, idempotency_key="k1")
    again = event_publish(team=team, topic="a.b", payload={"other": 1}, delay=99, idempotency_key="k1")
    assert not again.created and again.event.pk == first.event.pk
    assert [m.pk for m in again.messages] == [m.pk for m in first.messages]
    assert ScheduledMessage.objects.count() == 1
    # another team's key space is its own
    assert event_publish(team=other, topic="a.b", payload={}, delay=5, idempotency_key="k1").created


def test_an_event_over_the_in_flight_quota_is_refused_whole(team, versions):
    for name in ("a", "b", "c"):
        endpoint(team, name, versions)
        subscription_create(team=team, topic="t", endpoint=name)
    team.max_in_flight = 2
    team.save()
    with pytest.raises(QuotaExceeded):
        event_publish(team=team, topic="t", payload={}, delay=5, caller=member(team))
    assert not Event.objects.exists() and not ScheduledMessage.objects.exists()
    team.max_in_flight = 3
    team.save()
    assert len(event_publish(team=team, topic="t", payload={}, delay=5, caller=member(team)).messages) == 3


def test_a_message_refused_refuses_the_event_naming_its_endpoint(team, versions):
    endpoint(team, "tasks", versions, handler=Endpoint.Handler.CELERY_QUEUE, handler_target="")
    subscription_create(team=team, topic="t", endpoint="tasks")
    with pytest.raises(ValidationError) as refused:
        event_publish(team=team, topic="t", payload={"not": "a task"}, delay=5)
    assert "tasks" in str(refused.value.message_dict["payload"])
    assert not Event.objects.exists()


def test_inactive_endpoints_are_skipped(team, versions):
    endpoint(team, "paused", versions, is_active=False)
    subscription_create(team=team, topic="t", endpoint="paused")
    assert event_publish(team=team, topic="t", payload={}, delay=5).messages == []


@pytest.mark.parametrize("arguments, field", [
    ({"topic": "a.*"}, "topic"), ({"topic": ""}, "topic"), ({"topic": "x" * 256}, "topic"),
    ({"payload": None}, "payload"), ({"delay": -1}, "delay"), ({"delay": None}, "delay"),
    ({"delay": 10**12}, "delay"), ({"delay": "soon"}, "delay"),
    ({"delay": None, "deliver_at": timezone.now() + timedelta(days=10**5)}, "deliver_at"),
    ({"idempotency_key": ""}, "idempotency_key"), ({"idempotency_key": "a\x00"}, "idempotency_key"),
])
def test_bad_events_are_field_errors(team, arguments, field):
    with pytest.raises(ValidationError) as refused:
        event_publish(team=team, **{"topic": "a.b", "payload": {}, "delay": 1, **arguments})
    assert field in refused.value.message_dict


def test_subscriptions_are_validated_bounded_and_audited(team, other, versions, settings):
    endpoint(team, "ledger", versions)
    endpoint(other, "theirs", versions)
    with pytest.raises(ValidationError) as refused:
        subscription_create(team=team, topic="a.b*", endpoint="theirs", filter={"x": {"y": 1}})
    assert set(refused.value.message_dict) == {"topic", "endpoint", "filter"}
    with audited(AuditContext(source="command", caller=member())):
        made = subscription_create(team=team, topic="a.#", endpoint="ledger", filter={"k": 1})
        with pytest.raises(ValidationError) as again:
            subscription_create(team=team, topic="a.#", endpoint="ledger", filter={"k": 1})
        assert "already" in again.value.message_dict["topic"][0]
        subscription_delete(subscription=made)
    assert list(AuditEvent.objects.values_list("action", flat=True).order_by("id")) == [
        actions.SUBSCRIPTION_CREATE, actions.SUBSCRIPTION_DELETE]
    settings.DELAY_TEAM_MAX_SUBSCRIPTIONS = 2  # the made one was deleted: room for two
    subscription_create(team=team, topic="one", endpoint="ledger")
    subscription_create(team=team, topic="two", endpoint="ledger")
    with pytest.raises(ValidationError) as full:
        subscription_create(team=team, topic="three", endpoint="ledger")
    assert "DELAY_TEAM_MAX_SUBSCRIPTIONS" in full.value.message_dict["team"][0]
    assert Subscription.objects.filter(team=team).count() == 2


def test_cancel_cancels_the_waiting_messages_only_and_answers_how_many(team, other, versions):
    for name in ("a", "b", "c"):
        endpoint(team, name, versions)
        subscription_create(team=team, topic="t", endpoint=name)
    published = event_publish(team=team, topic="t", payload={}, delay=60)
    delivered = published.messages[0]
    ScheduledMessage.objects.filter(pk=delivered.pk).update(status=Status.DELIVERED, delivered_at=timezone.now())
    with audited(AuditContext(source="command", caller=member())):
        event, cancelled = event_cancel(event_id=published.event.pk, caller=member(team, scopes=["cancel", "read"]))
    assert cancelled == 2
    statuses = sorted(ScheduledMessage.objects.filter(event=event).values_list("status", flat=True))
    assert statuses == ["cancelled", "cancelled", "delivered"]
    assert AuditEvent.objects.filter(action="message.cancel").count() == 2
    assert AuditEvent.objects.get(action=actions.EVENT_CANCEL).extra == {"cancelled": 2}
    assert event_cancel(event_id=event.pk, caller=member(team))[1] == 0  # twice is fine


def test_another_teams_event_is_not_found_and_readers_may_not_cancel(team, other, versions):
    published = event_publish(team=team, topic="t", payload={}, delay=60)
    with pytest.raises(NotFound):
        event_get(event_id=published.event.pk, caller=member(other))
    with pytest.raises(NotFound):
        event_cancel(event_id=published.event.pk, caller=member(other))
    with pytest.raises(NotFound):
        event_get(event_id="not-a-uuid", caller=member(team))
    with pytest.raises(Forbidden):
        event_cancel(event_id=published.event.pk, caller=member(team, scopes=["read"]))
    assert event_get(event_id=published.event.pk, caller=member(team)).pk == published.event.pk

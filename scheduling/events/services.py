"""Subscriptions and events (issue 48; docs/guides/events.md): subscribe a team's endpoint to a
topic pattern, publish an event once and make one message per subscribed endpoint, cancel what
is still waiting. The messages go through messages/services.py's one scheduling path, so they are
delivered, retried, cancelled, listed, audited and counted against the in-flight quota as any
message is; an event that would cross the quota is refused whole (nothing stored)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from uuid_utils.compat import uuid7

from scheduling.audit import actions
from scheduling.audit.services import audit_record
from scheduling.config.conf import conf, setting_name
from scheduling.core import lifecycle
from scheduling.core.caller import PLATFORM, Caller
from scheduling.core.clock import MS, ceil_ms
from scheduling.core.errors import BulkValidationError, Conflict, Forbidden, NotFound
from scheduling.core.roles import Action
from scheduling.core.text import NUL_CHARACTERS, has_nul
from scheduling.core.topics import (
    TopicError,
    filter_matches,
    filter_parse,
    pattern_matches,
    pattern_parse,
    topic_parse,
)
from scheduling.events.selectors import (
    event_list_messages,
    subscription_count,
    subscription_list_for_matching,
)
from scheduling.messages.inputs import message_check_payload
from scheduling.messages.services import message_cancel, message_schedule_many
from scheduling.models import Endpoint, Event, ScheduledMessage, Subscription, Team
from scheduling.observability import metrics
from scheduling.teams.quotas import team_lock_counts
from topology import cascade


@dataclass(frozen=True)
class Published:
    event: Event
    messages: list[ScheduledMessage]
    created: bool  # False: the event already published under this idempotency key


def subscription_create(*, team: Team, topic: str, endpoint: str, filter=None) -> Subscription:
    """Subscribe the team's endpoint ``endpoint`` (a name) to a topic pattern, with an optional
    payload filter. ValidationError naming the field: a bad pattern or filter, an endpoint that is
    not the team's, the same subscription again, or the team at its DELAY_TEAM_MAX_SUBSCRIPTIONS."""
    errors = {}
    try:
        pattern_parse(topic)
    except TopicError as exc:
        errors["topic"] = str(exc)
    try:
        filter_parse(filter)
    except TopicError as exc:
        errors["filter"] = str(exc)
    found = Endpoint.objects.filter(team=team, name=endpoint).first() \
        if isinstance(endpoint, str) and not has_nul(endpoint) else None
    if found is None:
        errors["endpoint"] = f"team {team.name} has no endpoint {str(endpoint)[:100]!r}"
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        team_lock_counts(team_id=team.pk)  # two creates at the limit less one cannot both pass
        limit, used = conf().team_max_subscriptions, subscription_count(team_id=team.pk)
        if used >= limit:
            raise ValidationError({"team": f"team {team.name} has {used:,} subscriptions, its most "
                                           f"({setting_name('team_max_subscriptions')}): delete one first"})
        try:
            with transaction.atomic():
                subscription = Subscription.objects.create(team=team, topic=topic, endpoint=found,
                                                           filter=filter or {})
        except IntegrityError:
            raise ValidationError({"topic": f"endpoint {found.name!r} already has this subscription (topic and "
                                            "filter)"}) from None
        audit_record(action=actions.SUBSCRIPTION_CREATE, obj=subscription, team=team,
                     after={"topic": topic, "endpoint": found.name, "filter": subscription.filter})
    return subscription


def subscription_delete(*, subscription: Subscription) -> None:
    """Events published from now on no longer reach its endpoint; messages already made stay."""
    with transaction.atomic():
        audit_record(action=actions.SUBSCRIPTION_DELETE, obj=subscription, team=subscription.team,
                     before={"topic": subscription.topic, "endpoint": subscription.endpoint.name,
                             "filter": subscription.filter})
        subscription.delete()


def _due_at(delay, deliver_at, now: datetime) -> datetime:
    """The event's due time, bounded by v3's longest delay (each message's own version bounds it
    again); ValidationError on delay or deliver_at."""
    if (delay is None) == (deliver_at is None):
        raise ValidationError({"delay": "give exactly one of a delay or a deliver-at time"})
    limit_ms = cascade.V3.max_delay_ms
    if deliver_at is not None:
        if not isinstance(deliver_at, datetime) or timezone.is_naive(deliver_at):
            raise ValidationError({"deliver_at": "must be a date-time with a timezone, e.g. 2026-11-21T12:00:00Z"})
        if abs((deliver_at - now) // MS) > limit_ms:
            raise ValidationError({"deliver_at": f"is beyond the maximum delay of {limit_ms // 1000:,} s"})
        return ceil_ms(deliver_at)
    try:
        seconds = Decimal(str(delay)) if not isinstance(delay, bool) else None
    except (InvalidOperation, ValueError):
        seconds = None
    if seconds is None or not seconds.is_finite():
        raise ValidationError({"delay": "must be a finite number of seconds"})
    if seconds < 0:
        raise ValidationError({"delay": "must not be negative"})
    if seconds * 1000 > limit_ms:
        raise ValidationError({"delay": f"is over the maximum delay of {limit_ms // 1000:,} s"})
    return now + math.ceil(seconds * 1000) * MS


def _matching(team: Team, topic: tuple[str, ...], payload) -> list[Endpoint]:
    """The team's active endpoints with a subscription matching the topic and payload, each once
    (an endpoint with several matching subscriptions gets one message)."""
    endpoints: dict[int, Endpoint] = {}
    for subscription in subscription_list_for_matching(team_id=team.pk):
        endpoint = subscription.endpoint
        if endpoint.pk in endpoints or not endpoint.is_active:
            continue
        try:
            if pattern_matches(pattern_parse(subscription.topic), topic) and \
                    filter_matches(filter_parse(subscription.filter), payload):
                endpoints[endpoint.pk] = endpoint
        except TopicError:  # a row written around the service: it matches nothing
            continue
    return list(endpoints.values())


def _replayed(team: Team, key: str) -> Published:
    event = Event.objects.get(team=team, idempotency_key=key)
    return Published(event, event_list_messages(event_id=event.pk), created=False)


def event_publish(*, team: Team, topic: str, payload, delay=None, deliver_at: datetime | None = None,
                  idempotency_key: str | None = None, on_delivered=None, on_failed=None,
                  caller: Caller = PLATFORM, traceparent: str | None = None) -> Published:
    """Publish ``payload`` to ``topic`` in ``team``: one message per endpoint of the team whose
    subscription matches, all due at the event's time, saved with the event in one transaction
    (all or nothing: a message refused refuses the event, QuotaExceeded when they would cross
    the in-flight quota). The same ``idempotency_key`` in the team again answers the event it
    made. ``on_delivered``/``on_failed`` go to each message as a message's would."""
    errors = {}
    try:
        words = topic_parse(topic)
    except TopicError as exc:
        errors["topic"] = str(exc)
    try:
        message_check_payload(payload=payload)
    except ValidationError as exc:
        errors.update({k: v[0] for k, v in exc.message_dict.items()})
    key = idempotency_key
    if key is not None and (not isinstance(key, str) or not 1 <= len(key) <= 255 or has_nul(key)):
        errors["idempotency_key"] = f"must be a string of 1 to 255 characters, without {NUL_CHARACTERS}"
    now = ceil_ms(timezone.now())
    try:
        due_at = _due_at(delay, deliver_at, now)
    except ValidationError as exc:
        errors.update({k: v[0] for k, v in exc.message_dict.items()})
    if errors:
        raise ValidationError(errors)
    if key is not None and Event.objects.filter(team=team, idempotency_key=key).exists():
        return _replayed(team, key)
    with transaction.atomic():
        try:
            with transaction.atomic():
                event = Event.objects.create(id=uuid7(), team=team, topic=topic, payload=payload, due_at=due_at,
                                             idempotency_key=key)
        except IntegrityError:  # the same key published concurrently, and committed first
            return _replayed(team, key)
        endpoints = _matching(team, words, payload)
        items = []
        for endpoint in endpoints:
            item = {"endpoint": endpoint, "payload": payload, "deliver_at": due_at, "event_id": event.pk,
                    "traceparent": traceparent}
            item.update({name: value for name, value in (("on_delivered", on_delivered), ("on_failed", on_failed))
                         if value is not None})  # callbacks: the message path reads them (notifications)
            items.append(item)
        try:
            results = message_schedule_many(items=items, caller=caller) if items else []
        except BulkValidationError as exc:
            index, problems = next(iter(sorted(exc.errors.items())))
            name = endpoints[index].name
            raise ValidationError({field: f"endpoint {name!r}: {messages[0]}" for field, messages in problems.items()
                                   if messages}) from None
        messages = [result.message for result in results]
        event.message_count = len(messages)
        event.save(update_fields=["message_count"])
        audit_record(action=actions.EVENT_PUBLISH, obj=event, team=team,
                     after={"topic": topic, "due_at": due_at, "messages": len(messages), "idempotency_key": key})
        transaction.on_commit(lambda: metrics.event_published(team.name, matched=bool(messages)))
    return Published(event, messages, created=True)


def event_get(*, event_id, caller: Caller, action: Action = Action.READ) -> Event:
    """The event if ``caller`` may do ``action`` in its team: NotFound when it is not one of its
    teams' (or does not exist), Forbidden when it may only read it."""
    try:
        event = Event.objects.select_related("team").get(pk=event_id)
    except (Event.DoesNotExist, ValidationError, ValueError):
        raise NotFound(f"no event {str(event_id)[:64]}") from None
    if not caller.may(action, event.team_id):
        if action is not Action.READ and caller.may(Action.READ, event.team_id):
            raise Forbidden(f"you may not {action.name.lower()} events of team {event.team.name}")
        raise NotFound(f"no event {str(event_id)[:64]}")
    return event


def event_cancel(*, event_id, caller: Caller = PLATFORM) -> tuple[Event, int]:
    """Cancel the event's messages still waiting (pending or published), each as message_cancel
    does it (locked, audited); those already delivered, failed or cancelled stay. Answers the
    event and how many it cancelled."""
    event = event_get(event_id=event_id, caller=caller, action=Action.CANCEL)
    cancelled = 0
    with transaction.atomic():
        for message in event_list_messages(event_id=event.pk):
            if message.status not in lifecycle.IN_FLIGHT:
                continue
            try:
                after = message_cancel(message_id=message.pk, caller=caller)
            except Conflict:  # delivered meanwhile
                continue
            cancelled += after.status == lifecycle.Status.CANCELLED
        audit_record(action=actions.EVENT_CANCEL, obj=event, team=event.team, extra={"cancelled": cancelled})
    return event, cancelled

"""Cancel or republish every message matching filters ("everything still pending for billing due
before Friday", "every failed message of yesterday"), for the API and the admin.

The set is walked in batches of DELAY_PUBLISH_BATCH by id: each batch is locked, changed with the
lifecycle's compare-and-set and committed on its own, so no lock is held for longer than one
batch and the messages being delivered meanwhile wait milliseconds, not the whole action. A
republished batch is published after its commit, as one message is. Each action is a BulkAction
row whose ``done`` grows per batch: the admin shows it while it runs."""

from __future__ import annotations

import logging
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from scheduling.core import lifecycle
from scheduling.audit.services import audit_record
from scheduling.config.conf import conf
from scheduling.delivery.models import Trigger
from scheduling.core.errors import Unavailable
from scheduling.core.lifecycle import Event, Status
from scheduling.models import BulkAction, DeliveryMode, ScheduledMessage, Team
from scheduling.observability import metrics
from scheduling.endpoints.selectors import endpoint_get_one
from scheduling.messages.selectors import message_list_matching
from scheduling.messages.relay import relay_publish_rows
from scheduling.messages.services import message_wire_refusal

log = logging.getLogger(__name__)

FILTERS = ("endpoint", "status", "schedule", "due_before", "due_after", "created_before", "created_after")
# which messages each action can change: the statuses its event starts from (a cancelled one stays so)
_ACTS_ON = {BulkAction.Kind.CANCEL: sorted(lifecycle.sources(Event.CANCEL) - {Status.CANCELLED}),
            BulkAction.Kind.REPUBLISH: sorted(lifecycle.sources(Event.REPUBLISH))}


def _checked(kind: str, filters: dict, team: Team | None) -> dict:
    """The filters given, checked; ValidationError naming the field otherwise. ``team``: the one
    team whose messages it acts on (None: every team's, an operator's)."""
    given = {k: v for k, v in filters.items() if k in FILTERS and v not in (None, "")}
    if not given:
        raise ValidationError({"non_field_errors": f"give at least one filter: {', '.join(FILTERS)}"})
    if "status" in given and given["status"] not in _ACTS_ON[kind]:
        raise ValidationError({"status": f"a {kind} acts on {' or '.join(_ACTS_ON[kind])} messages only"})
    if "endpoint" in given:
        if endpoint_get_one(name=given["endpoint"], team_ids=None if team is None else [team.pk]) is None:
            raise ValidationError({"endpoint": f"unknown endpoint {given['endpoint']!r}"})
    for field in ("due_before", "due_after", "created_before", "created_after"):
        if field in given and (not isinstance(given[field], datetime) or timezone.is_naive(given[field])):
            raise ValidationError({field: "must be a date-time with a timezone"})
    return given


def _matching(kind: str, filters: dict, team_id: int | None):
    return message_list_matching(**filters, team_ids=None if team_id is None else [team_id]).filter(
        status__in=_ACTS_ON[kind])


def message_count_matching(*, kind: str, filters: dict, team: Team | None = None) -> int:
    """How many messages the action would change now (its dry run)."""
    return _matching(kind, _checked(kind, filters, team), getattr(team, "pk", None)).count()


def message_start_matching(*, kind: str, filters: dict, requested_by: str = "", team: Team | None = None) -> BulkAction:
    """Record an action on the team's messages matching ``filters`` (checked; ``team`` None:
    every team's), to run with message_apply_matching, here or in a worker; audited with its
    filter and count."""
    given = _checked(kind, filters, team)
    plain = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in given.items()}
    with transaction.atomic():
        action = BulkAction.objects.create(kind=kind, team=team, filters=plain, requested_by=requested_by,
                                           matched=_matching(kind, given, getattr(team, "pk", None)).count())
        audit_record(action=f"message.bulk_{kind}", obj=action, team=team,
                     extra={"filters": plain, "team": getattr(team, "name", None), "matched": action.matched})
    return action


def message_apply_matching(*, action: BulkAction) -> BulkAction:
    """Run a recorded action to its end, batch by batch (see the module's docstring). Messages
    that stop matching meanwhile (delivered, say) are left alone; what was done stays done if it
    fails halfway (the action says how far it went)."""
    filters = {k: datetime.fromisoformat(v) if k.endswith(("_before", "_after")) else v
               for k, v in action.filters.items()}
    batch, last = conf().publish_batch, None
    try:
        while True:
            changed, last = _apply_batch(action, filters, after=last, size=batch)
            if last is None:
                break
            if changed:
                BulkAction.objects.filter(pk=action.pk).update(done=action.done)
    except Exception as exc:
        action.state, action.error = BulkAction.State.FAILED, f"{type(exc).__name__}: {exc}"[:2000]
        log.exception("bulk %s %s stopped after %d message(s)", action.kind, action.pk, action.done)
    else:
        action.state = BulkAction.State.DONE
    action.finished_at = timezone.now()
    action.save(update_fields=["done", "state", "error", "finished_at"])
    return action


def _apply_batch(action: BulkAction, filters: dict, *, after, size: int) -> tuple[int, object]:
    """One batch in its own transaction: (messages changed, the last id looked at; None at the end)."""
    now = timezone.now()
    with transaction.atomic():
        qs = _matching(action.kind, filters, action.team_id).order_by("id")
        if after is not None:
            qs = qs.filter(id__gt=after)
        rows = list(qs.select_for_update(of=("self",)).select_related("endpoint", "topology")[:size])
        if not rows:
            return 0, None
        changed = []
        for row in rows:
            try:
                change = (lifecycle.cancel(row, now=now) if action.kind == BulkAction.Kind.CANCEL
                          else {**lifecycle.republish(row), "trigger": Trigger.BULK})
            except lifecycle.IllegalTransition:
                continue
            if action.kind != BulkAction.Kind.CANCEL and message_wire_refusal(message=row):
                continue  # not a task its endpoint (now a celery_queue) takes: it stays failed
            lifecycle.apply(row, change)
            changed.append(row)
        fields = (["status", "cancelled_at", "finished_at"] if action.kind == BulkAction.Kind.CANCEL
                  else ["status", "attempts", "delivered_at", "lateness_ms", "finished_at", "trigger"])
        ScheduledMessage.objects.bulk_update(changed, fields)
        if action.kind == BulkAction.Kind.CANCEL:
            for row in changed:
                metrics.cancelled(row)
        else:
            native = [row for row in changed if row.delivery_mode == DeliveryMode.NATIVE]
            transaction.on_commit(lambda: relay_publish_rows(rows=native))
    action.done += len(changed)
    return len(changed), rows[-1].id


def message_bulk_matching(*, kind: str, filters: dict, dry_run: bool = False, requested_by: str = "",
                          team: Team | None = None) -> int:
    """The API's call: how many of the team's messages match (dry run), or do it now and say how
    many it changed."""
    if dry_run:
        return message_count_matching(kind=kind, filters=filters, team=team)
    action = message_apply_matching(action=message_start_matching(kind=kind, filters=filters,
                                                                  requested_by=requested_by, team=team))
    if action.state == BulkAction.State.FAILED:
        raise Unavailable(f"bulk {kind} stopped after {action.done:,} message(s) (done; the rest untouched): "
                          f"{action.error}")
    return action.done

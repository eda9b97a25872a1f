"""Cancel or republish every message matching filters ("everything still pending for billing due
before Friday", "every failed message of yesterday"), for the API and the admin.

The set is walked in batches of DELAY_PUBLISH_BATCH by id: each batch is locked, changed with the
lifecycle's compare-and-set and committed on its own, so no lock is held for longer than one
batch and the messages being delivered meanwhile wait milliseconds, not the whole action. A
republished batch is published after its commit, as one message is. Each action is a BulkAction
row whose ``done`` grows per batch: the admin shows it while it runs.

A republish puts messages back in flight: each batch takes its teams' in-flight quotas
(teams/quotas.py), republishes what fits, and leaves the rest failed, counted in ``refused``. A
cancel records the copies its messages leave in the cascade, which count until their due time."""

from __future__ import annotations

import logging
from datetime import datetime

from celery import current_app
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from scheduling.audit import actions
from scheduling.audit.services import audit_record
from scheduling.config.conf import conf
from scheduling.core import lifecycle, task_names
from scheduling.core.errors import QuotaExceeded, Unavailable
from scheduling.core.lifecycle import Event, Status
from scheduling.db.counts import queryset_tally
from scheduling.endpoints.selectors import endpoint_get_one
from scheduling.messages.ordering import ordering_end
from scheduling.messages.relay import relay_publish_rows
from scheduling.messages.selectors import message_list_matching
from scheduling.messages.services import message_wire_refusal
from scheduling.models import BulkAction, DeliveryMode, ScheduledMessage, Team, Trigger
from scheduling.observability import metrics
from scheduling.teams.quotas import payload_size, team_admit_in_flight, team_record_copies

log = logging.getLogger(__name__)

# A dry run through the API counts no further: above it, "more than 10,000".
DRY_RUN_COUNT_CAP = 10_000
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


def message_count_matching(*, kind: str, filters: dict, team: Team | None = None, cap: int | None = None) -> int:
    """How many messages the action would change now (its dry run). ``cap``: counted no further
    than cap + 1 rows, a Tally (counts.py) exact up to the cap and a floor above it, so that a
    dry run over a team's whole history reads at most that much (the API's: DRY_RUN_COUNT_CAP)."""
    queryset = _matching(kind, _checked(kind, filters, team), getattr(team, "pk", None))
    if cap is None:
        return queryset.count()
    return queryset_tally(querysets={"matching": queryset}, cap=cap, floors={"matching"})["matching"]


def message_start_matching(*, kind: str, filters: dict, requested_by: str = "", team: Team | None = None) -> BulkAction:
    """Record an action on the team's messages matching ``filters`` (checked; ``team`` None:
    every team's), to run with message_apply_matching, here or in a worker; audited with its
    filter and count."""
    given = _checked(kind, filters, team)
    plain = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in given.items()}
    with transaction.atomic():
        action = BulkAction.objects.create(kind=kind, team=team, filters=plain, requested_by=requested_by,
                                           matched=_matching(kind, given, getattr(team, "pk", None)).count())
        audit_record(action=actions.MESSAGE_BULK[kind], obj=action, team=team,
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
            if changed or action.refused:
                BulkAction.objects.filter(pk=action.pk).update(done=action.done, refused=action.refused)
    except Exception as exc:
        action.state, action.error = BulkAction.State.FAILED, f"{type(exc).__name__}: {exc}"[:2000]
        log.exception("bulk %s %s stopped after %d message(s)", action.kind, action.pk, action.done)
    else:
        action.state = BulkAction.State.DONE
    action.finished_at = timezone.now()
    action.save(update_fields=["done", "refused", "state", "error", "finished_at"])
    return action


def _apply_batch(action: BulkAction, filters: dict, *, after, size: int) -> tuple[int, object]:
    """One batch in its own transaction: (messages changed, the last id looked at; None at the end)."""
    now = timezone.now()
    with transaction.atomic():
        qs = _matching(action.kind, filters, action.team_id).order_by("id")
        if after is not None:
            qs = qs.filter(id__gt=after)
        rows = list(qs.select_for_update(of=("self",)).select_related("endpoint__team", "topology")[:size])
        if not rows:
            return 0, None
        changes = []
        for row in rows:
            try:
                changes.append((row, lifecycle.cancel(row, now=now) if action.kind == BulkAction.Kind.CANCEL
                                else {**lifecycle.republish(row), "trigger": Trigger.BULK}))
            except lifecycle.IllegalTransition:
                continue
        if action.kind != BulkAction.Kind.CANCEL:
            # not a task its endpoint (now a celery_queue one) takes: it stays failed
            changes = [(row, change) for row, change in changes if not message_wire_refusal(message=row)]
        if action.kind == BulkAction.Kind.CANCEL:
            team_record_copies(rows=[row for row, _ in changes], now=now)  # their copies in the cascade count
        else:
            changes = _within_quotas(action, changes)
        changed = []
        for row, change in changes:
            lifecycle.apply(row, change)
            changed.append(row)
        fields = (["status", "cancelled_at", "finished_at"] if action.kind == BulkAction.Kind.CANCEL
                  else ["status", "attempts", "delivered_at", "lateness_ms", "finished_at", "trigger"])
        ScheduledMessage.objects.bulk_update(changed, fields)
        if action.kind == BulkAction.Kind.CANCEL:
            for row in changed:
                metrics.cancelled(row)
            keyed = {(row.endpoint_id, row.ordering_key) for row in changed if row.ordering_key is not None}
            if keyed:  # the next message of each key is woken (a call still out keeps its key until it ends)
                ordering_end(keys=keyed)
        else:
            native = [row for row in changed if row.delivery_mode == DeliveryMode.NATIVE]
            transaction.on_commit(lambda: relay_publish_rows(rows=native))
    action.done += len(changed)
    return len(changed), rows[-1].id


def _within_quotas(action: BulkAction, changes: list[tuple]) -> list[tuple]:
    """The republishes that fit in their teams' in-flight quotas (each team's lock taken, in the
    order of their ids, until the batch commits); the others are left failed and counted in the
    action's ``refused``, with the first reason in its ``error``."""
    per_team: dict[int, list[tuple]] = {}
    for row, change in changes:
        per_team.setdefault(row.endpoint.team_id, []).append((row, change))
    kept = []
    for _, team_changes in sorted(per_team.items()):
        admitted = team_admit_in_flight(team=team_changes[0][0].endpoint.team,
                                        sizes=[payload_size(row) for row, _ in team_changes], partial=True)
        kept += team_changes[:admitted.count]
        if admitted.refusal:
            action.refused += len(team_changes) - admitted.count
            action.error = action.error or f"{admitted.refusal} (the rest left failed)"
    return kept


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
    if action.refused:
        raise QuotaExceeded(f"bulk {kind}: {action.done:,} message(s) done, {action.refused:,} refused: "
                            f"{action.error}")
    return action.done


def message_enqueue_matching(*, action: BulkAction) -> None:
    """Run a recorded action in a worker (celery/tasks.py apply_bulk_action) once the transaction
    that recorded it commits: what the admin's "all matching" actions and the API's bulk cancel and
    republish do, instead of holding a web request for as long as it takes."""
    transaction.on_commit(lambda: current_app.send_task(task_names.BULK_ACTION, args=[action.pk]))

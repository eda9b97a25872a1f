"""Recurring schedules: upsert, pause, delete, and the materialiser that turns their coming runs
into ordinary scheduled messages ahead of time.

A run is a message with the idempotency key ``schedule:<key>:<revision>:<run time in ms>`` on
the schedule's endpoint: two materialisers at once (two beats, or a beat and an upsert), a
retried task or a restart find the run already there and make no second one. Each schedule is
materialised in a transaction of its own, under its row lock taken with SKIP LOCKED, so one
slow schedule holds no other. Runs are created up to DELAY_SCHEDULES_AHEAD_SECONDS ahead, and
always the next one: a daily run is in the cascade a day before it is due, and a run is never
late because it was created late (unless beat was down longer than that window).

Runs are messages in flight of the schedule's team, held to its in-flight quotas
(teams/quotas.py): a schedule whose runs in flight at once (the window over its interval) would
pass them is refused when it is made or changed, and a run that finds them full when it is due to
be made is skipped, counted on the schedule (``runs_skipped``, ``last_run_skipped_at``).

Jitter moves each run's due time by an offset fixed per run (rules.jitter_offset_ms); its key
keeps the nominal time, so a run made again is still the same run. A new revision cancels the runs
whose time is to come, not one whose time has passed while its jitter still holds it back: that
run is kept (the new revision's runs start after now), so an edit loses no run and makes none
twice. Catch-up makes the runs missed in a downtime and due within ``catchup_ms`` before now,
oldest first; older ones are counted on the schedule (``runs_missed``, ``last_run_missed_at``).

Overlap (core/ordering.py): with ``skip`` or ``buffer_one``, its runs share the platform's ordering
key ``schedule:<key>`` and carry the policy, so a run due while the previous run has not ended is
skipped, or waits (one at most); with ``allow`` (the default) they get no key and may overlap. A
change of the policy is a new revision: the runs to come are made again with (or without) the key."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from scheduling.audit import actions
from scheduling.audit.services import audit_changed, audit_record, audit_values
from scheduling.config.conf import conf, setting_name
from scheduling.core import ordering
from scheduling.core import schedule_rules as rules
from scheduling.core.clock import MS, ceil_ms, to_epoch_ms
from scheduling.core.errors import BulkValidationError, NotFound, QuotaExceeded
from scheduling.core.lifecycle import IN_FLIGHT
from scheduling.core.ordering import Overlap
from scheduling.core.text import has_nul
from scheduling.messages.inputs import PLATFORM_KEY_PREFIX, message_check_payload
from scheduling.messages.services import message_cancel, message_schedule_many
from scheduling.models import Endpoint, Schedule, ScheduledMessage, Team
from scheduling.models.teams import default_team_id
from scheduling.teams.quotas import (
    team_admit_in_flight,
    team_check_count,
    team_check_in_flight,
    team_lock_counts,
    team_min_interval_ms,
)

log = logging.getLogger(__name__)

MAX_RUNS_PER_PASS = 1_000  # runs one schedule gets per materialiser pass (a 1 s interval needs 60)
# what a change of these makes a new revision of (its runs to come are cancelled and made again)
_REVISED_BY = ("endpoint_id", "payload", "cron", "timezone", "interval_ms", "start_at", "end_at", "jitter_ms",
               "overlap")


@dataclass(frozen=True)
class RunsCreated:
    schedules: int  # schedules that got runs
    runs: int  # new messages
    skipped: int  # runs missed while the platform was down, not made (skip, older than the latest or the catch-up)
    over_quota: int = 0  # runs not made: the team's messages in flight were at its quota


def schedule_run_key(*, schedule: Schedule, run_at: datetime) -> str:
    """The idempotency key of one run of one revision."""
    return f"{PLATFORM_KEY_PREFIX}{schedule.key}:{schedule.revision}:{to_epoch_ms(run_at)}"


def _rule_values(*, cron, tz, interval_seconds, start_at, end_at) -> dict:
    """The rule's fields, checked; every problem is a field error."""
    errors: dict[str, str] = {}
    values = {"cron": "", "timezone": "UTC", "interval_ms": None, "start_at": start_at, "end_at": end_at}
    checks = [("timezone", rules.timezone_check, tz if tz is not None else "UTC")]
    if bool(cron) == (interval_seconds is not None):
        errors["cron"] = "give exactly one of cron or interval_seconds"
    elif cron:
        checks.append(("cron", rules.cron_check, cron))
    else:
        checks.append(("interval_ms", rules.interval_check, interval_seconds))
    for field, check, value in checks:
        try:
            values[field] = check(value)
        except ValidationError as exc:
            errors.update({k: v[0] for k, v in exc.message_dict.items()})
    for field, value in (("start_at", start_at), ("end_at", end_at)):
        if value is not None and (not isinstance(value, datetime) or timezone.is_naive(value)):
            errors[field] = "must be a date-time with a timezone, e.g. 2026-11-21T12:00:00Z"
    if not errors.keys() & {"start_at", "end_at"} and start_at and end_at and end_at <= start_at:
        errors["end_at"] = "must be after start_at"
    if errors:
        raise ValidationError(errors)
    return values


def schedule_check_rule(*, cron: str = "", timezone_name: str = "UTC", interval_seconds=None,
                        start_at: datetime | None = None, end_at: datetime | None = None) -> rules.Rule:
    """The rule these make (an interval's first run is ``start_at``), or ValidationError naming
    each field that is wrong: what the preview shows before anything is stored."""
    values = _rule_values(cron=cron, tz=timezone_name, interval_seconds=interval_seconds, start_at=start_at,
                          end_at=end_at)
    return rules.Rule(cron=values["cron"], tz=values["timezone"], interval_ms=values["interval_ms"],
                      anchor=ceil_ms(start_at) if values["interval_ms"] and start_at else None, start=start_at,
                      end=end_at)


def _team(team: Team | None) -> Team:
    return team if team is not None else Team.objects.get(pk=default_team_id())


# runs of a cron rule looked at for its shortest gap (a day of minutes has 1,440; a rule that runs
# more often than the team allows shows it within its first hundred runs)
_GAP_RUNS = 100


def _check_interval(team: Team, values: dict, errors: dict) -> None:
    """The team's shortest interval between two runs (a quota): an interval below it, or a cron
    rule whose runs come closer, is refused."""
    shortest = team_min_interval_ms(team=team)
    if values.get("interval_ms") is not None and values["interval_ms"] < shortest:
        errors["interval_seconds"] = (f"is below the shortest interval team {team.name} may use "
                                      f"({shortest // 1000:,} s, its quota min_schedule_interval_seconds)")
    elif values.get("cron") and shortest > 60_000:
        rule = rules.Rule(cron=values["cron"], tz=values["timezone"], interval_ms=None, anchor=None, start=None,
                          end=None)
        runs = rules.preview(rule, after=timezone.now(), count=_GAP_RUNS)
        gaps = [(b - a).total_seconds() * 1000 for a, b in zip(runs, runs[1:])]
        if gaps and min(gaps) < shortest:
            errors["cron"] = (f"runs {min(gaps) / 1000:,.0f} s apart at times, below the shortest interval team "
                              f"{team.name} may use ({shortest // 1000:,} s, its quota min_schedule_interval_seconds)")


def schedule_upsert(*, key: str, endpoint: str | Endpoint, payload, cron: str = "", timezone_name: str = "UTC",
                    interval_seconds=None, start_at: datetime | None = None, end_at: datetime | None = None,
                    missed_runs: str = Schedule.MissedRuns.SKIP, jitter_seconds=None, catchup_seconds=None,
                    overlap: str = Overlap.ALLOW, team: Team | None = None) -> tuple[Schedule, bool]:
    """Create the team's schedule ``key``, or make it what is given (True when created). A change
    to its rule, payload, endpoint or jitter is a new revision: its runs to come are cancelled and
    made again from the new rule (a run whose time has passed, still held back by its jitter, is
    kept as it was made). Its first runs are created before this returns. ``team``: the
    default team when None; the endpoint must be the team's. ``jitter_seconds``: each run due a
    fixed offset in [0, it) after its time (below its interval); ``catchup_seconds``: after a
    downtime, the missed runs due within it before now are made (None: ``missed_runs`` decides).
    ``overlap``: a run due while the previous one has not ended is sent (allow), skipped (skip), or
    waits for its end, one at most (buffer_one)."""
    team = _team(team)
    target, values = _checked(key=key, endpoint=endpoint, payload=payload, cron=cron, timezone_name=timezone_name,
                              interval_seconds=interval_seconds, start_at=start_at, end_at=end_at,
                              missed_runs=missed_runs, jitter_seconds=jitter_seconds,
                              catchup_seconds=catchup_seconds, overlap=overlap, team=team)
    now = timezone.now()
    with transaction.atomic():
        if not Schedule.objects.filter(team=team, key=key).exists():
            team_lock_counts(team_id=team.pk)  # two new schedules at the quota less one: one passes
            team_check_count(team=team, quota="schedules", used=team.schedules.count())
        schedule, created = Schedule.objects.select_for_update().get_or_create(team=team, key=key, defaults=values)
        before = None if created else audit_values(obj=schedule)
        revised, reanchored = (True, True) if created else _revision(schedule, values)
        for field, value in values.items():
            setattr(schedule, field, value)
        if revised and not created:
            _cancel_runs(schedule=schedule, run_after=now)
            schedule.revision += 1
        if revised:
            if reanchored:
                schedule.anchor_at = _anchor(schedule, now)
            schedule.next_run_at = schedule.rule.next_run(now)
            schedule.last_run_at = None
        schedule.endpoint = target
        schedule.save()
        if created:
            audit_record(action=actions.SCHEDULE_CREATE, obj=schedule, team=team, after=audit_values(obj=schedule))
        else:
            old, new = audit_changed(before=before, after=audit_values(obj=schedule))
            if new:
                audit_record(action=actions.SCHEDULE_UPDATE, obj=schedule, team=team, before=old, after=new)
        if not schedule.is_paused:
            if revised:
                _check_runs_fit(schedule, now)
            _create_runs(schedule, now)
    return schedule, created


def _runs_at_once(schedule: Schedule, now: datetime) -> int:
    """How many of its runs are in flight at once: those within the window runs are made ahead
    in, and always the next one."""
    limit = now + _ahead()
    runs = rules.preview(schedule.rule, after=now, count=MAX_RUNS_PER_PASS)
    return max(1, sum(1 for run in runs if run <= limit))


def _payload_bytes(schedule: Schedule) -> int:
    return len(message_check_payload(payload=schedule.payload).encode())


def _check_runs_fit(schedule: Schedule, now: datetime) -> None:
    """QuotaExceeded when the team's messages in flight and this schedule's runs in flight at once
    would pass its in-flight quotas (under the team's lock, to the commit)."""
    at_once = _runs_at_once(schedule, now)
    try:
        team_check_in_flight(team=schedule.team, sizes=[_payload_bytes(schedule)] * at_once)
    except QuotaExceeded as exc:
        raise QuotaExceeded(f"schedule {schedule.key!r} would keep {at_once:,} run(s) in flight at once (made "
                            f"{_ahead().total_seconds():g} s ahead): {exc}") from None


def _revision(schedule: Schedule, values: dict) -> tuple[bool, bool]:
    """(revised, reanchored): a change to the rule, payload or endpoint is a new revision; one to
    when it runs also moves its anchor."""
    revised = any(getattr(schedule, f) != values[f] for f in _REVISED_BY)
    return revised, any(getattr(schedule, f) != values[f] for f in ("cron", "interval_ms", "start_at"))


def _check_jitter(values: dict, errors: dict) -> None:
    """A jitter below the rule's shortest gap between runs: a run never passes the next one, so
    runs stay in order (and a run made up after a downtime comes before the one after it)."""
    jitter = values.get("jitter_ms")
    if not jitter:
        return
    if values.get("interval_ms") is not None:
        if jitter >= values["interval_ms"]:
            errors["jitter_seconds"] = f"must be below interval_seconds ({values['interval_ms'] / 1000:g} s)"
    elif values.get("cron"):
        rule = rules.Rule(cron=values["cron"], tz=values["timezone"])
        runs = rules.preview(rule, after=timezone.now(), count=_GAP_RUNS)
        gaps = [(b - a).total_seconds() * 1000 for a, b in zip(runs, runs[1:])]
        if gaps and jitter >= min(gaps):
            errors["jitter_seconds"] = f"must be below the shortest gap between two runs ({min(gaps) / 1000:,.0f} s)"


def _policy_values(jitter_seconds, catchup_seconds, errors: dict) -> dict:
    """jitter_ms and catchup_ms (None when not given), each problem a field error."""
    values = {"jitter_ms": None, "catchup_ms": None}
    for field, check, value in (("jitter_ms", rules.jitter_check, jitter_seconds),
                                ("catchup_ms", rules.catchup_check, catchup_seconds)):
        if value is None:
            continue
        try:
            values[field] = check(value)
        except ValidationError as exc:
            errors.update({k: v[0] for k, v in exc.message_dict.items()})
    values["jitter_ms"] = values["jitter_ms"] or None  # 0: no jitter, stored as none
    return values


def _checked(*, key, endpoint, payload, cron, timezone_name, interval_seconds, start_at, end_at, missed_runs,
             jitter_seconds, catchup_seconds, team: Team, overlap=Overlap.ALLOW) -> tuple[Endpoint, dict]:
    """The endpoint and the schedule's field values, every problem reported at once (a
    ValidationError naming each field)."""
    errors: dict[str, str] = {}
    try:
        Schedule._meta.get_field("key").clean(key, None)
    except ValidationError as exc:
        errors["key"] = exc.messages[0]
    name = endpoint.name if isinstance(endpoint, Endpoint) else endpoint
    target = (Endpoint.objects.select_related("topology").filter(team=team, name=name).first()
              if isinstance(name, str) and not has_nul(name) else None)
    if target is None:
        errors["endpoint"] = f"unknown endpoint {name!r} in team {team.name}"
    elif target.handler == Endpoint.Handler.CELERY_QUEUE:
        errors["endpoint"] = f"endpoint {name!r} is a Celery queue: schedule Celery tasks with beat instead"
    try:
        message_check_payload(payload=payload)
    except ValidationError as exc:
        errors.update({k: v[0] for k, v in exc.message_dict.items()})
    if missed_runs not in Schedule.MissedRuns.values:
        errors["missed_runs"] = f"must be one of {', '.join(Schedule.MissedRuns.values)}"
    # every handler a schedule may use reports its run's end (record-only: its hand-over; webhook: the
    # call returned or gave up; celery_task: its worker's task_postrun, or a lease): no other refusal
    if not isinstance(overlap, str) or overlap not in {o.value for o in Overlap}:
        errors["overlap"] = f"must be one of {', '.join(o.value for o in Overlap)}"
    elif overlap != Overlap.ALLOW and not conf().ordering_keys:  # its runs would carry a key old workers ignore
        errors["overlap"] = ordering.keys_off_problem(setting=setting_name("ordering_keys"), allowed=Overlap.ALLOW)
    policies = _policy_values(jitter_seconds, catchup_seconds, errors)
    try:
        values = _rule_values(cron=cron, tz=timezone_name, interval_seconds=interval_seconds,
                              start_at=start_at, end_at=end_at)
    except ValidationError as exc:
        errors.update({k: v[0] for k, v in exc.message_dict.items()})
    else:
        _check_interval(team, values, errors)
        if "jitter_seconds" not in errors:
            _check_jitter({**values, **policies}, errors)
    if errors:
        raise ValidationError(errors)
    values.update(endpoint_id=target.pk, payload=payload, missed_runs=missed_runs, overlap=str(overlap), **policies)
    return target, values


def _anchor(schedule: Schedule, now: datetime) -> datetime | None:
    """An interval schedule's first run: start_at, or one interval from now."""
    if schedule.interval_ms is None:
        return None
    return ceil_ms(schedule.start_at or now + timedelta(milliseconds=schedule.interval_ms))


def _locked(key: str, team: Team | None) -> Schedule:
    team = _team(team)
    try:
        return (Schedule.objects.select_for_update(of=("self",)).select_related("endpoint__topology", "team")
                .get(team=team, key=key))
    except (Schedule.DoesNotExist, ValueError):
        raise NotFound(f"no schedule {key!r} in team {team.name}") from None


def schedule_set_paused(*, key: str, paused: bool, team: Team | None = None) -> Schedule:
    """Pause: no more runs, and the runs already made are cancelled. Resume: runs again from now
    on (the runs that fell while paused are not made up)."""
    now = timezone.now()
    with transaction.atomic():
        schedule = _locked(key, team)
        if schedule.is_paused == paused:
            return schedule
        audit_record(action=actions.SCHEDULE_PAUSE if paused else actions.SCHEDULE_RESUME, obj=schedule,
                     team=schedule.team, before={"is_paused": not paused}, after={"is_paused": paused})
        schedule.is_paused = paused
        if paused:
            _cancel_runs(schedule=schedule)
            schedule.revision += 1  # the runs made again on resume need keys of their own
        else:
            schedule.next_run_at = schedule.rule.next_run(now)
            schedule.last_run_at = None
        schedule.save()
        if not paused:
            _create_runs(schedule, now)
    return schedule


def schedule_delete(*, key: str, team: Team | None = None) -> int:
    """Delete the schedule and cancel its runs still to come; its delivered runs stay in the
    history (listed by its key). Returns how many runs were cancelled."""
    with transaction.atomic():
        schedule = _locked(key, team)
        cancelled = _cancel_runs(schedule=schedule)
        audit_record(action=actions.SCHEDULE_DELETE, obj=schedule, team=schedule.team, before=audit_values(obj=schedule),
                     extra={"runs_cancelled": cancelled})
        schedule.delete()
    return cancelled


def _cancel_runs(*, schedule: Schedule, run_after: datetime | None = None) -> int:
    """Cancel its runs in flight: messages with its key on its team's endpoints (another team may
    use the key). ``run_after``: only the runs whose time by the rule (the one in their key) is
    after it. A run whose time has passed is the old revision's to send, even while its jitter
    still holds it back (due later): the new revision makes runs after now only (rule.next_run),
    so cancelling it would lose that run, and keeping it makes none twice."""
    runs = ScheduledMessage.objects.filter(schedule=schedule.key, status__in=[s.value for s in IN_FLIGHT],
                                           endpoint_id__in=Endpoint.objects.filter(team_id=schedule.team_id)
                                           .values("id"))
    if run_after is not None:  # a run's due time is at or after its time: those due by then are past too
        runs = runs.filter(due_at__gt=run_after)
    ids = [message_id for message_id, key in runs.values_list("id", "idempotency_key")
           if run_after is None or (run_at := rules.run_time_of_key(key)) is None or run_at > run_after]
    for message_id in ids:
        message_cancel(message_id=message_id)
    return len(ids)


def schedule_create_runs(*, now: datetime | None = None) -> RunsCreated:
    """The materialiser (beat, every DELAY_SCHEDULES_EVERY_SECONDS): for each schedule whose next
    run is within the window, create the runs in it."""
    now = now or timezone.now()
    due = list(Schedule.objects.filter(is_paused=False, next_run_at__lte=now + _ahead())
               .order_by("next_run_at").values_list("pk", flat=True)[:10_000])
    schedules = runs = skipped = over_quota = 0
    for pk in due:
        with transaction.atomic():
            schedule = (Schedule.objects.select_for_update(skip_locked=True, of=("self",))
                        .select_related("endpoint__topology", "team").filter(pk=pk, is_paused=False).first())
            if schedule is None or schedule.next_run_at is None or schedule.next_run_at > now + _ahead():
                continue  # another materialiser has it, or did it
            made, missed, refused = _create_runs(schedule, now)
        schedules += bool(made)
        runs += made
        skipped += missed
        over_quota += refused
    return RunsCreated(schedules=schedules, runs=runs, skipped=skipped, over_quota=over_quota)


def _ahead() -> timedelta:
    """The window runs are made in: at least two beat periods, so that no run waits for one."""
    settings = conf()
    return timedelta(seconds=max(settings.schedules_ahead_seconds, 2 * settings.schedules_every_seconds))


def _missed(schedule: Schedule, cursor: datetime, now: datetime) -> tuple[list[datetime], int, datetime | None]:
    """Runs from ``cursor`` (not made, before ``now``: the platform was down) by its policy:
    (runs to make now among them, runs skipped, where its runs go on from). With a catch-up window,
    those within it are made, oldest first, from the first of them on (the normal loop makes them,
    MAX_RUNS_PER_PASS at most: the rest next pass); without, skipped, or the latest made at once."""
    rule = schedule.rule
    if schedule.catchup_ms is not None:
        # no further back than its topology's longest delay: a message due before that is refused
        window = now - min(timedelta(milliseconds=schedule.catchup_ms),
                           timedelta(milliseconds=schedule.endpoint.topology.max_delay_ms))
        if cursor >= window:
            return [], 0, cursor
        first = rule.next_run(window - MS)  # the first run in the window (or after it)
        skipped, last = rule.missed(cursor, window - MS)
        _count_missed(schedule, skipped, last)
        return [], skipped, first
    skipped, latest = rule.missed(cursor, now)
    made = []
    if latest is not None and schedule.missed_runs == Schedule.MissedRuns.LATEST:
        made.append(latest)
        skipped -= 1
        _count_missed(schedule, skipped, rule.last_run_until(latest - MS))
    else:
        _count_missed(schedule, skipped, latest)
    return made, skipped, rule.next_run(now)


def _count_missed(schedule: Schedule, skipped: int, last: datetime | None) -> None:
    """Runs missed and not made, counted on the schedule and logged."""
    if skipped <= 0:
        return
    schedule.runs_missed += skipped
    schedule.last_run_missed_at = last or schedule.last_run_missed_at
    log.warning("schedule %s: %d run(s) missed while the platform was down were skipped (the last at %s)",
                schedule.key, skipped, schedule.last_run_missed_at)


def _create_runs(schedule: Schedule, now: datetime) -> tuple[int, int, int]:
    """Make ``schedule``'s runs from its next_run_at to the window's end (and its next run
    whatever its distance), in the caller's transaction, with its row locked. Runs that fell
    before ``now`` were missed (the platform was down): made up within the catch-up window, else
    skipped or the latest made at once (_missed). Runs that do not fit in the team's in-flight
    quotas are skipped and counted on the schedule. Returns (runs made, runs skipped, runs over
    the quota). Each run is due at its time moved by its jitter; its key keeps its time."""
    rule, cursor = schedule.rule, schedule.next_run_at
    made: list[datetime] = []
    skipped = 0
    if cursor is not None and cursor <= now:
        made, skipped, cursor = _missed(schedule, cursor, now)
    limit = now + _ahead()
    longest = timedelta(milliseconds=schedule.endpoint.topology.max_delay_ms)
    future = schedule.last_run_at is not None and schedule.last_run_at > now
    runs = rule.runs_after(cursor, inclusive=True) if cursor is not None else iter(())
    cursor = next(runs, None)
    while cursor is not None and (cursor <= limit or not future) and schedule.run_due_at(cursor) - now <= longest \
            and len(made) < MAX_RUNS_PER_PASS:
        made.append(cursor)
        future = cursor > now
        cursor = next(runs, None)
    refused = 0
    if made:
        admitted = team_admit_in_flight(team=schedule.team, sizes=[_payload_bytes(schedule)] * len(made),
                                        partial=True)
        refused = len(made) - admitted.count
        if refused:
            log.warning("schedule %s: %d run(s) skipped, up to %s: %s", schedule.key, refused,
                        made[-1].isoformat(), admitted.refusal)
            schedule.runs_skipped += refused
            schedule.last_run_skipped_at = made[-1]
            schedule.last_run_at = made[-1]
            made = made[:admitted.count]
    if made:
        keyed = {} if schedule.overlap == Overlap.ALLOW else {  # one run at a time (core/ordering.py)
            "ordering_key": ordering.schedule_key(schedule.key), "overlap": schedule.overlap}
        items = [{"endpoint": schedule.endpoint, "payload": schedule.payload, "deliver_at": schedule.run_due_at(run),
                  "idempotency_key": schedule_run_key(schedule=schedule, run_at=run), "schedule": schedule.key,
                  **keyed} for run in made]
        try:
            message_schedule_many(items=items)
        except BulkValidationError as exc:  # the endpoint was deactivated, say: try again next pass
            first = next(iter(exc.errors.values()))
            log.warning("schedule %s: runs not created: %s", schedule.key,
                        "; ".join(f"{k}: {v[0]}" for k, v in first.items()))
            return 0, skipped, 0
        schedule.last_run_at = max(made[-1], schedule.last_run_at or made[-1])
    schedule.next_run_at = cursor
    schedule.save(update_fields=["next_run_at", "last_run_at", "runs_skipped", "last_run_skipped_at", "runs_missed",
                                 "last_run_missed_at", "updated_at"])
    return len(made), max(skipped, 0), refused

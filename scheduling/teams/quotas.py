"""What bounds a team: counts (endpoints, schedules, messages in flight and their payload bytes:
over one is a 403 naming it), the shortest interval of its schedules, its API rates
(api/throttles.py), and the grants an operator gives it (Celery tasks, webhook networks). A
team's own value wins over the platform's default (DELAY_TEAM_*). Crossing 80 % of a count logs a
warning (once a minute per team and quota) and shows in ``delay_team_quota_usage_ratio``.

The in-flight quotas have one check, team_admit_in_flight, on every path that puts messages in
flight; it takes the team's lock to the commit and counts the messages pending or published and
the copies that cancelled or moved messages left in the cascade (CascadeCopy, until their old due
time): exact, whichever process writes (docs/guides/teams.md#quotas has what it costs)."""

from __future__ import annotations

import fnmatch
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import orjson
from django.core.exceptions import ValidationError
from django.db import connection

from scheduling.config.conf import conf, setting_name
from scheduling.config.parsers import ApiRate
from scheduling.core.errors import QuotaExceeded
from scheduling.core.lifecycle import IN_FLIGHT, Status
from scheduling.core.networks import Network, parse_networks
from scheduling.models import CascadeCopy, Endpoint, ScheduledMessage, Team
from scheduling.observability import metrics
from scheduling.security import guards

log = logging.getLogger(__name__)

WARN_AT = 0.8

# quota -> (the team's field, the platform's setting)
COUNTS = {
    "endpoints": ("max_endpoints", "team_max_endpoints"),
    "schedules": ("max_schedules", "team_max_schedules"),
    "messages_in_flight": ("max_in_flight", "team_max_in_flight"),
    "bytes_in_flight": ("max_in_flight_bytes", "team_max_in_flight_bytes"),
}


def team_limit(*, team: Team, quota: str) -> int:
    field, setting = COUNTS[quota]
    own: int | None = getattr(team, field)
    default: int = getattr(conf(), setting)
    return own if own is not None else default


def _variable(quota: str) -> str:
    return setting_name(COUNTS[quota][1])


class QuotaWarnings:
    """When each team's quota was last logged as near its limit, in this process: a warning at
    most once a minute per team and quota (``quota_warnings``, owned by _watch)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at: dict[tuple[int, str], float] = {}

    def due(self, key: tuple[int, str], now: float) -> bool:
        """Whether ``key`` may warn at ``now`` (not in the last minute); if so, it is noted."""
        with self.lock:
            if now - self.at.get(key, -60.0) < 60.0:
                return False
            self.at[key] = now
            return True


quota_warnings = QuotaWarnings()


def _watch(team: Team, quota: str, used: int, limit: int) -> tuple[str, int, int] | None:
    """Show the team's use of ``quota``; from 80 %, log it (once a minute per team and quota) and
    return (quota, used, limit): what a caller may tell the team (notifications: quota.warning)."""
    ratio = used / limit if limit else 1.0
    metrics.quota_usage(team.name, quota, ratio)
    if ratio < WARN_AT:
        return None
    now = time.monotonic()
    if not quota_warnings.due((team.pk, quota), now):
        return (quota, used, limit)
    log.warning("team %s uses %d of its %d %s (%d %%)", team.name, used, limit, quota.replace("_", " "),
                100 * ratio)
    return (quota, used, limit)


def team_check_count(*, team: Team, quota: str, used: int, adding: int = 1) -> None:
    """QuotaExceeded when ``used + adding`` would pass the team's ``quota``."""
    limit = team_limit(team=team, quota=quota)
    _watch(team, quota, used + adding, limit)
    if used + adding > limit:
        metrics.quota_refused(team.name, quota)
        raise QuotaExceeded(
            f"team {team.name} has {used:,} {quota.replace('_', ' ')} of its quota of {limit:,}"
            f" ({quota}; the platform's default is {_variable(quota)}, an operator may raise the team's own)")


# The advisory lock of a team's counts (in flight, schedules, endpoints): PostgreSQL's one-bigint key space (the flow
# slots' two-int keys are another), "dpq" in the high bytes and the team's id in the low 40 bits.
TEAM_LOCK_BASE = int.from_bytes(b"dpq", "big") << 40


@dataclass(frozen=True)
class InFlight:
    """What a team has in flight: messages pending or published, and their copies still in the
    cascade after a cancel or a reschedule (each counted until its old due time), with the bytes
    of their payloads."""

    messages: int
    bytes: int


QuotaWarning = tuple[str, int, int]  # (quota, used, limit): _watch


@dataclass(frozen=True)
class Admitted:
    """How many of the messages asked for fit (the first ``count``), and why the rest do not."""

    count: int
    refusal: str = ""
    warnings: tuple[QuotaWarning, ...] = ()  # each in-flight quota at 80 % or more with them


def _count_in_flight(team_id: int, cap: int) -> InFlight:
    """The team's messages in flight, counted up to ``cap`` (never more than the quota's worth),
    with their payload bytes: an index-only range of message_in_flight_bytes per endpoint (a row
    from before payload_bytes counts 0 bytes); plus its copies still in the cascade
    (cascade_copy_team_until: only the copies not yet due are read). One statement."""
    with connection.cursor() as cursor:
        # the waiting messages (an ordering key's turn) are still to be delivered: counted too, a
        # second index-only range (message_waiting); without it they would escape the quota
        cursor.execute(
            f"SELECT m.n + w.n + c.n, m.b + w.b + c.b FROM "
            f"(SELECT count(*) AS n, coalesce(sum(payload_bytes), 0) AS b FROM (SELECT payload_bytes FROM "
            f"{ScheduledMessage._meta.db_table} WHERE endpoint_id IN (SELECT id FROM {Endpoint._meta.db_table} "
            f"WHERE team_id = %s) AND status = ANY(%s) LIMIT %s) AS r) AS m, "
            f"(SELECT count(*) AS n, coalesce(sum(payload_bytes), 0) AS b FROM (SELECT payload_bytes FROM "
            f"{ScheduledMessage._meta.db_table} WHERE endpoint_id IN (SELECT id FROM {Endpoint._meta.db_table} "
            f"WHERE team_id = %s) AND status = '{Status.WAITING.value}' LIMIT %s) AS r) AS w, "
            f"(SELECT count(*) AS n, coalesce(sum(payload_bytes), 0) AS b FROM {CascadeCopy._meta.db_table} "
            f"WHERE team_id = %s AND until > statement_timestamp()) AS c",
            [team_id, sorted(s.value for s in IN_FLIGHT), cap, team_id, cap, team_id])
        messages, size = cursor.fetchone()
        return InFlight(messages=messages, bytes=int(size))


def team_lock_counts(*, team_id: int) -> None:
    """Hold the team's counts until the transaction ends: a second writer of the team waits here,
    then counts what the first committed (READ COMMITTED: each statement sees the commits before
    it). Two requests at a quota less one cannot both pass."""
    if not connection.in_atomic_block:
        raise RuntimeError("a team's quota is checked inside the transaction that adds to it")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [TEAM_LOCK_BASE | team_id])


def team_in_flight(*, team: Team) -> InFlight:
    """What the team has in flight now (counted up to its quota and one), under its lock."""
    team_lock_counts(team_id=team.pk)
    return _count_in_flight(team.pk, team_limit(team=team, quota="messages_in_flight") + 1)


# Far below its quotas a team is admitted on a count at most RECOUNT_SECONDS old (per process, with
# what this process admitted since), without the lock: an exact count is a range of the team's
# in-flight index as long as what it has in flight, and under the lock every request of the team
# would wait for it. Within the margin (a tenth of the quota, and at least the figures below) the
# count is exact and locked. Crossing a quota through the stale count would take more than the
# margin's worth admitted by other processes within one recount: above the platform's intake
# (docs/guides/teams.md#messages-and-bytes-in-flight).
RECOUNT_SECONDS = 1.0
EXACT_WITHIN_MESSAGES = 10_000
EXACT_WITHIN_BYTES = 64 * 1024 * 1024


@dataclass
class _Count:
    """A team's recent count: what was counted, when (monotonic), and what was admitted since."""

    counted: InFlight
    at: float
    messages: int = 0
    bytes: int = 0


class _Recent:
    """Per process: team id -> its recent count."""

    lock = threading.Lock()
    of: dict[int, _Count] = {}


def _far_below(team: Team, sizes: list[int], limit: int, byte_limit: int) -> tuple[QuotaWarning, ...] | None:
    """The warnings (_watch), as a tuple, when the recent count leaves the messages below both
    quotas by more than their margins (and counted as admitted here); None when the exact, locked
    count must decide."""
    adding, adding_bytes = len(sizes), sum(sizes)
    room = limit - max(limit // 10, EXACT_WITHIN_MESSAGES)
    byte_room = byte_limit - max(byte_limit // 10, EXACT_WITHIN_BYTES)
    if adding > room or adding_bytes > byte_room:  # small quotas are always counted exactly
        return None
    now = time.monotonic()
    with _Recent.lock:
        entry = _Recent.of.get(team.pk)
    if entry is None or now - entry.at > RECOUNT_SECONDS:
        entry = _Count(_count_in_flight(team.pk, room + 1), now)
        with _Recent.lock:
            _Recent.of[team.pk] = entry
    with _Recent.lock:
        if (entry.counted.messages + entry.messages + adding > room
                or entry.counted.bytes + entry.bytes + adding_bytes > byte_room):
            return None
        entry.messages, entry.bytes = entry.messages + adding, entry.bytes + adding_bytes
    return tuple(w for w in (_watch(team, "messages_in_flight", entry.counted.messages + entry.messages, limit),
                             _watch(team, "bytes_in_flight", entry.counted.bytes + entry.bytes, byte_limit)) if w)


def team_admit_in_flight(*, team: Team, sizes: list[int], partial: bool = False) -> Admitted:
    """THE in-flight check, before messages go into flight by any path (scheduled, a schedule's
    run, republished, resent, rescheduled with a copy left behind, bulk or admin): ``sizes`` are
    their payloads' bytes, in order. Far below the quotas, a recent count admits them (_far_below);
    near them, the team's lock (held to the commit) and an exact count decide.
    Whole (``partial`` False): QuotaExceeded naming the quota unless all fit. Partial: the first
    ones that fit, and why the others do not (counted in the refusals' metric)."""
    limit = team_limit(team=team, quota="messages_in_flight")
    byte_limit = team_limit(team=team, quota="bytes_in_flight")
    warnings = _far_below(team, sizes, limit, byte_limit)
    if warnings is not None:
        return Admitted(count=len(sizes), warnings=warnings)
    used = team_in_flight(team=team)
    warnings = tuple(w for w in (_watch(team, "messages_in_flight", used.messages + len(sizes), limit),
                                 _watch(team, "bytes_in_flight", used.bytes + sum(sizes), byte_limit)) if w)
    fit, total = 0, used.bytes
    for size in sizes:
        if used.messages + fit + 1 > limit or total + size > byte_limit:
            break
        fit, total = fit + 1, total + size
    if fit == len(sizes):
        return Admitted(count=fit, warnings=warnings)
    quota = "messages_in_flight" if used.messages + fit + 1 > limit else "bytes_in_flight"
    if not partial:  # the error names the whole request
        team_check_count(team=team, quota=quota, used=used.messages if quota == "messages_in_flight" else used.bytes,
                         adding=len(sizes) if quota == "messages_in_flight" else sum(sizes))
    metrics.quota_refused(team.name, quota)
    return Admitted(count=fit, refusal=_refusal(team, quota, InFlight(messages=used.messages + fit, bytes=total)),
                    warnings=warnings)


def _refusal(team: Team, quota: str, used: InFlight) -> str:
    """What team_check_count says, for the messages left out (``used``: with the ones admitted)."""
    value = used.messages if quota == "messages_in_flight" else used.bytes
    limit = team_limit(team=team, quota=quota)
    return (f"team {team.name} has {value:,} {quota.replace('_', ' ')} of its quota of {limit:,}"
            f" ({quota}; the platform's default is {_variable(quota)}, an operator may raise the team's own)")


def team_check_in_flight(*, team: Team, sizes: list[int]) -> tuple[QuotaWarning, ...]:
    """QuotaExceeded unless all of ``sizes`` fit (team_admit_in_flight, whole); the warnings."""
    return team_admit_in_flight(team=team, sizes=sizes).warnings


def team_forget_counts() -> None:
    """Count again at the next check (tests: as another process would, knowing nothing recent)."""
    with _Recent.lock:
        _Recent.of.clear()


def team_record_copies(*, rows: Iterable[ScheduledMessage], now: datetime) -> int:
    """Before ``rows`` are cancelled or moved: each one published (in the broker) for a due time
    still to come leaves a copy in the cascade until then, counted toward its team's quotas.
    Returns how many were recorded."""
    from scheduling.models import CascadeCopy

    # django-stubs types a not-null foreign key's id that has a default (Endpoint.team) as int | None
    copies = [CascadeCopy(team_id=row.endpoint.team_id,  # type: ignore[misc]
                          message_id=row.id, until=row.due_at,
                          payload_bytes=payload_size(row))
              for row in rows if leaves_copy(row, now)]
    CascadeCopy.objects.bulk_create(copies)
    return len(copies)


def leaves_copy(row: ScheduledMessage, now: datetime) -> bool:
    """Cancelled or moved now, the row leaves a copy in the cascade: it is in the broker
    (published) for a due time still to come. (A handler retry's copy carries its backoff's time,
    seconds to minutes, and is not counted.)"""
    return row.status == Status.PUBLISHED and row.due_at > now


def team_forget_copies(*, before: datetime) -> int:
    """The copies whose due time has passed (they left the broker): the prune removes them."""
    from scheduling.models import CascadeCopy

    return CascadeCopy.objects.filter(until__lt=before).delete()[0]


def payload_size(row: ScheduledMessage) -> int:
    """A row's payload bytes: as stored, or measured for a row from before the column."""
    if row.payload_bytes is not None:
        return row.payload_bytes
    return len(orjson.dumps(row.payload, option=orjson.OPT_NON_STR_KEYS))


def team_min_interval_ms(*, team: Team) -> int:
    own = team.min_schedule_interval_seconds
    return 1000 * (own if own is not None else conf().team_min_schedule_interval_seconds)


def _items(text: str) -> list[str]:
    return [item.strip() for line in (text or "").splitlines() for item in line.split(",") if item.strip()]


def team_task_refusal(*, team: Team, task: str) -> str | None:
    """Why the team may not run ``task``: the platform's allowlist (and never the platform's own
    tasks) first, then the team's own, which an operator grants."""
    why = guards.task_refusal(task, conf().celery_task_allowlist)
    if why:
        return why
    patterns = _items(team.celery_task_allowlist)
    if any(fnmatch.fnmatchcase(task, pattern) for pattern in patterns):
        return None
    if not patterns:
        return f"task {task!r} is not allowed for team {team.name}: an operator has granted it no tasks"
    return f"task {task!r} is not allowed for team {team.name}: it matches none of {', '.join(patterns)}"


def team_webhook_networks(*, team: Team | None) -> tuple[Network, ...]:
    """The networks the team's webhooks may reach although the guard refuses them: the platform's
    (for every team) and the team's own grant."""
    own = parse_networks(_items(team.webhook_allowed_networks)) if team is not None else ()
    return tuple(conf().webhook_allowed_networks) + tuple(own)


def team_check_settings(*, team: Team) -> None:
    """A team's rates, networks and task patterns, checked as the settings they stand beside."""
    errors = {}
    for field in ("api_rate", "key_api_rate"):
        if getattr(team, field):
            try:
                ApiRate().parse(getattr(team, field), field)
            except Exception as exc:  # ImproperlyConfigured, worded for the field
                errors[field] = str(exc)
    try:
        parse_networks(_items(team.webhook_allowed_networks))
    except ValueError as exc:
        errors["webhook_allowed_networks"] = str(exc)
    bad = [p for p in _items(team.celery_task_allowlist) if len(p) > 200]
    if bad:
        errors["celery_task_allowlist"] = "a pattern is longer than 200 characters"
    if errors:
        raise ValidationError(errors)

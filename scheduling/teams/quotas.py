"""What bounds a team: counts (endpoints, schedules, messages in flight: over one is a 403 naming
it), the shortest interval of its schedules, its API rates (api/throttles.py), and the grants an
operator gives it (Celery tasks, webhook networks). A team's own value wins over the platform's
default (DELAY_TEAM_*). Crossing 80 % of a count logs a warning (once a minute per team and
quota) and shows in ``delay_team_quota_usage_ratio``."""

from __future__ import annotations

import fnmatch
import logging
import threading
import time

from django.core.exceptions import ValidationError
from django.db import connection

from scheduling.config.conf import conf, setting_name
from scheduling.core.errors import QuotaExceeded
from scheduling.core.lifecycle import IN_FLIGHT
from scheduling.core.networks import parse_networks
from scheduling.security import guards
from scheduling.teams.models import Team

log = logging.getLogger(__name__)

WARN_AT = 0.8
IN_FLIGHT_RECOUNT_SECONDS = 1.0  # a process recounts a team's messages in flight at most this often

# quota -> (the team's field, the platform's setting)
COUNTS = {
    "endpoints": ("max_endpoints", "team_max_endpoints"),
    "schedules": ("max_schedules", "team_max_schedules"),
    "messages_in_flight": ("max_in_flight", "team_max_in_flight"),
}


def team_limit(*, team: Team, quota: str) -> int:
    field, setting = COUNTS[quota]
    own = getattr(team, field)
    return own if own is not None else getattr(conf(), setting)


def _variable(quota: str) -> str:
    return setting_name(COUNTS[quota][1])


class _Warned:
    lock = threading.Lock()
    at: dict[tuple[int, str], float] = {}


def _watch(team: Team, quota: str, used: int, limit: int) -> None:
    from scheduling.observability import metrics

    ratio = used / limit if limit else 1.0
    metrics.quota_usage(team.name, quota, ratio)
    if ratio < WARN_AT:
        return
    now = time.monotonic()
    with _Warned.lock:
        if now - _Warned.at.get((team.pk, quota), -60.0) < 60.0:
            return
        _Warned.at[(team.pk, quota)] = now
    log.warning("team %s uses %d of its %d %s (%d %%)", team.name, used, limit, quota.replace("_", " "),
                100 * ratio)


def team_check_count(*, team: Team, quota: str, used: int, adding: int = 1) -> None:
    """QuotaExceeded when ``used + adding`` would pass the team's ``quota``."""
    limit = team_limit(team=team, quota=quota)
    _watch(team, quota, used + adding, limit)
    if used + adding > limit:
        from scheduling.observability import metrics

        metrics.quota_refused(team.name, quota)
        raise QuotaExceeded(
            f"team {team.name} has {used:,} {quota.replace('_', ' ')} of its quota of {limit:,}"
            f" ({quota}; the platform's default is {_variable(quota)}, an operator may raise the team's own)")


class _InFlight:
    """Per process: team id -> (count read, monotonic time read, added here since)."""

    lock = threading.Lock()
    of: dict[int, list] = {}


def _count_in_flight(team_id: int, cap: int) -> int:
    """Messages pending or published of the team's endpoints, counted up to ``cap`` (an
    index-only scan of the in-flight index, never more than the quota's worth of it)."""
    from scheduling.models import Endpoint, ScheduledMessage

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {ScheduledMessage._meta.db_table} WHERE endpoint_id IN "
            f"(SELECT id FROM {Endpoint._meta.db_table} WHERE team_id = %s) AND status = ANY(%s) LIMIT %s) AS m",
            [team_id, sorted(s.value for s in IN_FLIGHT), cap])
        return cursor.fetchone()[0]


def team_check_in_flight(*, team: Team, adding: int) -> None:
    """The messages-in-flight quota before ``adding`` new ones: recounted at most once a second per
    process, with what this process added since (other processes' additions show at the recount:
    a burst may pass the quota by what they scheduled within that second)."""
    limit = team_limit(team=team, quota="messages_in_flight")
    now = time.monotonic()
    with _InFlight.lock:
        entry = _InFlight.of.get(team.pk)
    if entry is None or now - entry[1] > IN_FLIGHT_RECOUNT_SECONDS:
        entry = [_count_in_flight(team.pk, limit + 1), now, 0]
        with _InFlight.lock:
            _InFlight.of[team.pk] = entry
    team_check_count(team=team, quota="messages_in_flight", used=entry[0] + entry[2], adding=adding)
    with _InFlight.lock:
        entry[2] += adding


def team_forget_counts() -> None:
    """For tests: recount at the next check."""
    with _InFlight.lock:
        _InFlight.of.clear()


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


def team_webhook_networks(*, team: Team | None) -> tuple:
    """The networks the team's webhooks may reach although the guard refuses them: the platform's
    (for every team) and the team's own grant."""
    own = parse_networks(_items(team.webhook_allowed_networks)) if team is not None else ()
    return tuple(conf().webhook_allowed_networks) + tuple(own)


def team_check_settings(*, team: Team) -> None:
    """A team's rates, networks and task patterns, checked as the settings they stand beside."""
    from scheduling.config.parsers import ApiRate

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

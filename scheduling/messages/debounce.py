"""Debounce, applied to new messages as they are saved (services._save), inside the scheduling
transaction: a transaction-scoped advisory lock per (endpoint, key) serialises two requests with
one key, so they never both leave a message waiting; keys are independent (no global lock). The
rules are core/debounce.py's; the statuses and transitions the lifecycle's."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import Max

from scheduling.core import debounce as rules
from scheduling.core import lifecycle
from scheduling.core.clock import MS
from scheduling.models import ScheduledMessage
from scheduling.observability import metrics
from scheduling.teams.quotas import team_record_copies

# The lock's space of names: another feature's advisory locks never share a (endpoint, key)'s.
_LOCK_PREFIX = "delay.debounce"


def message_debounce_check(*, value, max_delay_ms: int, errors: dict) -> dict:
    """A request's ``debounce`` -> the row's debounce fields ({} without one); problems go to
    ``errors`` named ``debounce.<field>`` (inputs.message_build)."""
    parsed, problems = rules.parse(value, max_delay_s=max_delay_ms // 1000)
    errors.update(problems)
    if parsed is None:
        return {}
    return {"debounce_key": parsed.key, "debounce_mode": parsed.mode.value, "debounce_seconds": parsed.seconds,
            "debounce_max_seconds": parsed.max_seconds}


def _lock(pairs: set[tuple[int, str]]) -> None:
    """Take each (endpoint, key)'s lock, in the order of their hashes (two bulks never wait on each
    other), until the transaction ends."""
    names = [f"{_LOCK_PREFIX}:{endpoint_id}:{key}" for endpoint_id, key in pairs]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_advisory_xact_lock(h)) FROM (SELECT hashtextextended(n, 0) AS h "
                       "FROM unnest(%s::text[]) AS n ORDER BY 1) AS sorted", [names])


def _handed_over(row: ScheduledMessage, now: datetime) -> bool:
    """A webhook call of it is in flight (its lease): it is being delivered, not waiting."""
    return row.call_lease_until is not None and row.call_lease_until > now


def _supersede(row: ScheduledMessage, now: datetime) -> None:
    team_record_copies(rows=[row], now=now)  # a copy in the cascade counts toward its quotas until it leaves
    row.save(update_fields=lifecycle.apply(row, lifecycle.supersede(row, now=now)))


def message_debounce_apply(*, rows: list[ScheduledMessage]) -> list[ScheduledMessage]:
    """Debounce new, unsaved ``rows`` (pending, in their order) against each other and the saved
    ones, under their keys' locks: sets each keyed row's window and due time, marks those a leading
    window takes ``superseded`` (they are saved so, never published), and supersedes (saves) the
    waiting rows a trailing one replaces. Returns every row superseded, counted once committed."""
    keyed = [row for row in rows if row.debounce_key is not None]
    if not keyed:
        return []
    pairs = {(row.endpoint_id, row.debounce_key) for row in keyed}
    _lock(pairs)
    near = {"endpoint_id__in": {e for e, _ in pairs}, "debounce_key__in": {k for _, k in pairs}}
    waiting: dict[tuple[int, str], list[ScheduledMessage]] = {}
    if any(row.debounce_mode == rules.Mode.TRAILING for row in keyed):
        for row in ScheduledMessage.objects.select_for_update(of=("self",)).select_related("endpoint").filter(
                status__in=lifecycle.IN_FLIGHT_VALUES, debounce_mode=rules.Mode.TRAILING.value, **near):
            waiting.setdefault((row.endpoint_id, row.debounce_key), []).append(row)
    windows: dict[tuple[int, str], datetime] = {}
    if any(row.debounce_mode == rules.Mode.LEADING for row in keyed):
        earliest = min(row.created_at for row in keyed)
        for endpoint_id, key, until in ScheduledMessage.objects.filter(
                debounce_mode=rules.Mode.LEADING.value, debounce_until__gt=earliest, **near).values(
                "endpoint_id", "debounce_key").annotate(until=Max("debounce_until")).values_list(
                "endpoint_id", "debounce_key", "until"):
            windows[(endpoint_id, key)] = until
    superseded, unsaved = [], {id(row) for row in keyed}
    for row in keyed:
        pair, now = (row.endpoint_id, row.debounce_key), row.created_at
        if row.debounce_mode == rules.Mode.LEADING:
            until = windows.get(pair)
            if rules.leading_open(until=until, now=now):
                row.debounce_until = until
                lifecycle.apply(row, lifecycle.supersede(row, now=now))
                superseded.append(row)
            else:
                row.debounce_until = windows[pair] = now + (row.debounce_seconds * 1000) * MS
            continue
        live = [w for w in waiting.get(pair, []) if not _handed_over(w, now)]
        if live:  # the window's cap travels to the newest
            row.debounce_until = min(w.debounce_until for w in live)
        else:
            row.debounce_until = now + (row.debounce_max_seconds * 1000) * MS
        for older in live:
            if id(older) in unsaved:  # new in this request: saved superseded
                lifecycle.apply(older, lifecycle.supersede(older, now=now))
            else:
                _supersede(older, now)
            superseded.append(older)
        asked = row.__dict__.setdefault("_debounce_asked_due_at", row.due_at)  # kept for a second attempt
        row.due_at = rules.trailing_due(asked=asked, now=now, seconds=row.debounce_seconds,
                                        until=row.debounce_until)
        row.requested_delay_ms = max(0, (row.due_at - now) // MS)
        waiting[pair] = [row]
    metrics.superseded_by_debounce(superseded)
    return superseded

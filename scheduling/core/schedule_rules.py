"""When a recurring schedule runs: pure functions of its rule, no database (models.Schedule.rule).

A rule is a five-field cron expression read in an IANA timezone (by cronsim, which follows
Debian cron across daylight-saving changes), or a fixed interval from an anchor. Run times are
aware datetimes in UTC, at millisecond precision (the platform's).

Daylight saving, for a cron rule with a fixed hour (say ``30 2 * * *`` in Europe/Berlin):

- spring forward: 02:30 does not exist that day; the run is at 03:00, the first valid minute
  after the gap (cronsim does what Debian cron does);
- fall back: 02:30 happens twice; the rule runs once, at the first (the summer-time one).
  A rule whose hour is ``*`` runs in both hours, like cron.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError
from django.core.exceptions import ValidationError

from scheduling.core.clock import MS, from_epoch_ms, to_epoch_ms

UTC = timezone.utc
MIN_INTERVAL_MS = 1000  # one run a second: what one schedule may ask
MAX_INTERVAL_MS = 10 * 366 * 86_400_000  # ten years: beyond every cascade's longest delay
CRON_FIELDS = ("minute", "hour", "day of month", "month", "day of week")
MAX_JITTER_MS = 86_400_000  # a day: a run moved further is another run
MAX_CATCHUP_MS = 31 * 86_400_000  # a month of missed runs made up after a downtime


@dataclass(frozen=True)
class Rule:
    """A schedule's recurrence. Exactly one of ``cron`` and ``interval_ms``; ``anchor`` is the
    first run of an interval rule (runs are anchor + k x interval); ``start``/``end`` bound
    the runs (both included)."""

    cron: str = ""
    tz: str = "UTC"
    interval_ms: int | None = None
    anchor: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None

    def runs_after(self, moment: datetime, *, inclusive: bool = False) -> Iterator[datetime]:
        """Run times after ``moment`` (or at it, when ``inclusive``), in order, in UTC."""
        floor = max(moment, self.start) if self.start else moment
        inclusive = inclusive or (self.start is not None and self.start > moment)
        runs = self._interval_runs(floor, inclusive) if self.interval_ms else self._cron_runs(floor, inclusive)
        try:
            for run in runs:
                if self.end is not None and run > self.end:
                    return
                yield run
        except OverflowError:  # past the year 9999: no more runs
            return

    def next_run(self, moment: datetime) -> datetime | None:
        return next(self.runs_after(moment), None)

    def missed(self, first: datetime, moment: datetime, *, cap: int = 100_000) -> tuple[int, datetime | None]:
        """Runs from ``first`` to ``moment`` (both included): how many (counted up to ``cap``) and
        the latest of them."""
        count, latest = 0, None
        for run in self.runs_after(first, inclusive=True):
            if run > moment:
                break
            count, latest = count + 1, run
            if count >= cap:  # a long downtime: the latest without walking to it
                return count, self._latest_until(moment)
        return count, latest

    def last_run_until(self, moment: datetime) -> datetime | None:
        """The last run at or before ``moment`` (None when there is none)."""
        return self._latest_until(moment)

    def _latest_until(self, moment: datetime) -> datetime | None:
        """The last run at or before ``moment``, found without walking to it."""
        if self.end is not None and moment > self.end:
            moment = self.end
        run: datetime | None
        try:
            if self.interval_ms:
                step, anchor = self.interval_ms * MS, self.anchor or moment
                run = anchor + math.floor((moment - anchor) / step) * step
            else:
                local = next(CronSim(self.cron, (moment + MS).astimezone(ZoneInfo(self.tz)), reverse=True), None)
                run = local.astimezone(UTC) if local else None
        except OverflowError:
            return None
        return run if run is not None and (self.start is None or run >= self.start) else None

    def _interval_runs(self, floor: datetime, inclusive: bool) -> Iterator[datetime]:
        assert self.interval_ms is not None  # called for an interval rule only
        step = self.interval_ms * MS
        anchor = self.anchor or floor
        k = 0 if floor < anchor else math.floor((floor - anchor) / step)
        while True:
            run = anchor + k * step
            if run > floor or (inclusive and run == floor):
                yield run
            k += 1

    def _cron_runs(self, floor: datetime, inclusive: bool) -> Iterator[datetime]:
        zone = ZoneInfo(self.tz)
        # cronsim yields matches strictly after its start, at whole minutes
        start = floor - MS if inclusive else floor
        for local in CronSim(self.cron, start.astimezone(zone)):
            yield local.astimezone(UTC)


def cron_check(expression: object) -> str:
    """The expression, trimmed and single-spaced, or ValidationError on ``cron`` saying why."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValidationError({"cron": "must be a cron expression of five fields (minute hour day month weekday)"})
    fields = expression.split()
    if len(fields) != len(CRON_FIELDS):
        raise ValidationError({"cron": f"has {len(fields)} fields; give five: {', '.join(CRON_FIELDS)} "
                                       "(e.g. '30 2 * * *')"})
    normal = " ".join(fields)
    try:
        CronSim(normal, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise ValidationError({"cron": f"{normal!r} is not valid: {str(exc).lower()}"}) from None
    return normal


def timezone_check(name: object) -> str:
    """An IANA timezone name as given, or ValidationError on ``timezone``."""
    if not isinstance(name, str) or name not in _zones():
        raise ValidationError({"timezone": f"unknown timezone {name!r}: give an IANA name such as "
                                           "'Europe/Berlin' or 'UTC'"})
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError({"timezone": f"timezone {name!r} has no data on this server"}) from None
    return name


def interval_check(seconds: object) -> int:
    """Seconds (fractions allowed) -> milliseconds (rounded), or ValidationError on ``interval_seconds``."""
    try:
        if isinstance(seconds, bool):
            raise ValueError(seconds)
        value = seconds if isinstance(seconds, Decimal) else Decimal(str(seconds))
    except (InvalidOperation, ValueError):
        raise ValidationError({"interval_seconds": "must be a number of seconds"}) from None
    if not value.is_finite():
        raise ValidationError({"interval_seconds": "must be a finite number of seconds"})
    if value * 1000 < MIN_INTERVAL_MS:
        raise ValidationError({"interval_seconds": f"must be at least {MIN_INTERVAL_MS // 1000} s"})
    if value * 1000 > MAX_INTERVAL_MS:
        raise ValidationError({"interval_seconds": f"must be at most {MAX_INTERVAL_MS // 1000:,} s (ten years)"})
    return round(value * 1000)  # to the millisecond, the platform's precision


def jitter_offset_ms(*, seed: str, run_at: datetime, jitter_ms: int | None) -> int:
    """How far a run's due time moves after its nominal time ``run_at``: in [0, jitter_ms), the
    same for the same (seed, run) every time it is asked (a hash, no randomness), so a retried
    pass, a second materialiser or a run made again gets the same offset, while the runs of many
    schedules at one cron minute spread evenly over the window. 0 without jitter."""
    if not jitter_ms:
        return 0
    digest = hashlib.blake2b(f"{seed}|{to_epoch_ms(run_at)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % jitter_ms


def run_time_of_key(key: str | None) -> datetime | None:
    """A run's time by its schedule's rule, from its idempotency key
    (``schedule:<key>:<revision>:<run time in ms>``, schedules/services.py schedule_run_key): its
    due time is that moved by its jitter. None for a key of another shape."""
    ms = (key or "").rpartition(":")[2]
    if not key or not key.startswith("schedule:") or not ms.isdigit() or len(ms) > 15:
        return None
    return from_epoch_ms(int(ms))


def _milliseconds(seconds: object, field: str, *, most_ms: int, most: str) -> int:
    """Seconds (fractions allowed) -> milliseconds, 0 to ``most_ms``, or ValidationError on ``field``."""
    try:
        if isinstance(seconds, bool):
            raise ValueError(seconds)
        value = seconds if isinstance(seconds, Decimal) else Decimal(str(seconds))
    except (InvalidOperation, ValueError):
        raise ValidationError({field: "must be a number of seconds"}) from None
    if not value.is_finite() or value < 0:
        raise ValidationError({field: "must be a finite number of seconds, 0 or more"})
    if value * 1000 > most_ms:
        raise ValidationError({field: f"must be at most {most_ms // 1000:,} s ({most})"})
    return round(value * 1000)


def jitter_check(seconds: object) -> int:
    """``jitter_seconds`` -> milliseconds (0 to a day), or ValidationError on ``jitter_seconds``;
    the rule's own bound (below its interval) is checked with the rule."""
    return _milliseconds(seconds, "jitter_seconds", most_ms=MAX_JITTER_MS, most="a day")


def catchup_check(seconds: object) -> int:
    """``catchup_seconds`` -> milliseconds (0 to 31 days), or ValidationError on ``catchup_seconds``."""
    return _milliseconds(seconds, "catchup_seconds", most_ms=MAX_CATCHUP_MS, most="31 days")


def preview(rule: Rule, *, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` runs after ``after`` (fewer when ``end`` comes first)."""
    runs = rule.runs_after(after)
    return [run for _, run in zip(range(count), runs)]


def _zones() -> frozenset[str]:
    global _ZONES
    if _ZONES is None:
        _ZONES = frozenset(available_timezones())
    return _ZONES


_ZONES: frozenset[str] | None = None

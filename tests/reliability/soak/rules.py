"""The soak's plan and its rules, pure (no I/O), so they can be unit-tested: the settings read from
the environment (one readable line for a bad one), when rows are printed, faults made and the table
vacuumed, which sample is the first after warm-up, and the issue's rule for a flat resource (the
table's plateau has its own: tests/reliability/soak/plateau.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scheduling.core.durations import parse_duration
from tests.reliability.soak.plateau import BOUND

ROWS = 12  # a row every 5 minutes of an hour
KILLS_PER_RUN = 6  # the worker is SIGKILLed every sixth of the run: every 10 minutes of an hour
TOLERANCE = 0.10  # "the last half within 10 % of the first sample after warm-up"


class SoakConfigError(ValueError):
    """A setting the soak cannot run with; its text is the one line the user reads."""


@dataclass(frozen=True)
class Plan:
    minutes: float = 60
    rate: int = 300  # messages scheduled per second
    min_delay_s: float = 1.0
    max_delay_s: float = 300.0
    cancel_share: float = 0.05  # one request each: 15/s at 300/s (two web workers on a busy 2-core machine)
    retention_s: float = 120.0  # DELAY_RETENTION (and DELAY_FAILED_RETENTION)
    prune_every_s: float = 60.0  # DELAY_PRUNE_EVERY
    rows: int = ROWS
    kills_at_s: tuple[float, ...] | None = None  # None: every sixth of the run (kill_times); () for none
    restart_at_s: float | None = None  # None: once, in the judged half (restart_at); negative for none
    autovacuum_naptime_s: float = 60.0  # PostgreSQL's default; a short run scales it down with the rest
    table_tolerance: float = TOLERANCE  # growth over the last vacuum cycles; the 3-minute test allows more
    table_bound: float = BOUND  # no row after warm-up above this many times the base: heap, indexes, live rows

    @property
    def seconds(self) -> float:
        return self.minutes * 60

    @property
    def sample_every_s(self) -> float:
        return self.seconds / self.rows

    @property
    def sample_times(self) -> list[float]:
        return [self.sample_every_s * (i + 1) for i in range(self.rows)]

    @property
    def kill_times(self) -> list[float]:
        """Every sixth of the run (10 min of an hour), half a row after the row: a row never reads a
        worker that has just started, and every row after the first kill reads one of similar age."""
        if self.kills_at_s is not None:
            return list(self.kills_at_s)
        every = self.seconds / KILLS_PER_RUN
        return [k * every + self.sample_every_s / 2 for k in range(1, KILLS_PER_RUN) if k * every < self.seconds]

    @property
    def restart_at(self) -> float | None:
        """Once, in the judged half, halfway between two rows and between two kills (37.5 min of 60)."""
        if self.restart_at_s is not None:
            return self.restart_at_s if self.restart_at_s >= 0 else None
        return (self.rows // 2 + 1.5) * self.sample_every_s

    @property
    def window_s(self) -> float:
        """How long a message stays in the table at most: the longest delay, then its retention,
        plus up to one prune period before a prune takes it and one for the prune's own run."""
        return self.max_delay_s + self.retention_s + 2 * self.prune_every_s

    @property
    def warm_up_s(self) -> float:
        """Two windows: after one, the table holds its steady mix of rows; its indexes reach their
        steady size about one window later (measured: the total size levels off two windows in,
        the heap after one; autovacuum frees an index page only on its second pass)."""
        return 2 * self.window_s

    @property
    def base_index(self) -> int:
        """The first row at or after the warm-up: every resource is judged against it."""
        return next(i for i, t in enumerate(self.sample_times) if t >= self.warm_up_s - 1e-9)

    @property
    def vacuum_rows(self) -> tuple[int, ...]:
        """The rows before which the soak runs VACUUM on the messages table, as an operator's
        maintenance would: the base (the judged rows start from a vacuumed table), the row halfway
        from there and the last (the run ends on a complete cycle), so every run has the two
        complete cycles the heap's rule needs, whatever autovacuum did; its passes come on top."""
        return tuple(sorted({self.base_index, (self.base_index + self.rows - 1) // 2, self.rows - 1}))

    @property
    def judged_indices(self) -> list[int]:
        """The last half of the rows (those after the run's midpoint)."""
        return [i for i, t in enumerate(self.sample_times) if t > self.seconds / 2 + 1e-9]


def _number(environ: dict, name: str, default: str, kind=float, low: float | None = None,
            high: float | None = None, example: str = "") -> float:
    raw = environ.get(name, "").strip() or default
    try:
        value = kind(raw)
    except ValueError:
        raise SoakConfigError(f"{name} must be a {'whole ' if kind is int else ''}number{example}, not {raw!r}") from None
    if not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high):
        bounds = f"from {low:g}" + (f" to {high:g}" if high is not None else " up")
        raise SoakConfigError(f"{name} must be {bounds}, not {raw!r}")
    return value


def _seconds(environ: dict, name: str, default: str) -> float:
    raw = environ.get(name, "").strip() or default
    try:
        seconds = parse_duration(raw, name=name).total_seconds()
    except ValueError as exc:
        raise SoakConfigError(str(exc)) from None
    if seconds <= 0:
        raise SoakConfigError(f"{name} must be longer than 0, not {raw!r}")
    return seconds


def plan_from_env(environ: dict) -> Plan:
    """SOAK_MINUTES, SOAK_RATE, SOAK_MAX_DELAY, SOAK_CANCEL_SHARE, SOAK_RETENTION, SOAK_PRUNE_EVERY."""
    plan = Plan(
        minutes=_number(environ, "SOAK_MINUTES", "60", low=1, example=" of minutes such as 60"),
        rate=int(_number(environ, "SOAK_RATE", "300", int, low=1, high=5000, example=" of messages a second")),
        max_delay_s=_seconds(environ, "SOAK_MAX_DELAY", "5m"),
        cancel_share=_number(environ, "SOAK_CANCEL_SHARE", "0.05", low=0, high=0.9, example=" such as 0.05"),
        retention_s=_seconds(environ, "SOAK_RETENTION", "2m"),
        prune_every_s=_seconds(environ, "SOAK_PRUNE_EVERY", "1m"),
    )
    return check(plan)


def check(plan: Plan) -> Plan:
    if plan.max_delay_s < plan.min_delay_s:
        raise SoakConfigError(f"SOAK_MAX_DELAY must be at least {plan.min_delay_s:g}s")
    if plan.warm_up_s > plan.seconds / 2:
        need = math.ceil(2 * plan.warm_up_s / 60)
        raise SoakConfigError(
            f"SOAK_MINUTES={plan.minutes:g} is too short: the warm-up (twice the longest delay + retention + 2 prune "
            f"periods = {plan.warm_up_s:g} s) must end by the run's midpoint; use SOAK_MINUTES={need} or more, or "
            "shorter SOAK_MAX_DELAY / SOAK_RETENTION / SOAK_PRUNE_EVERY")
    return plan


@dataclass(frozen=True)
class Judgement:
    """One resource under the flat rule, against its base (the first row after warm-up): the
    highest and the lowest judged row, and the distance the rule allows."""

    name: str
    ok: bool  # no judged row above base + allowed: nothing grows
    base: float
    highest: float
    highest_index: int
    lowest: float
    lowest_index: int
    allowed: float

    @property
    def fell(self) -> bool:
        """A judged row below base - allowed: outside "within 10 %" the other way (not a leak)."""
        return self.lowest < self.base - self.allowed

    def describe(self, fmt=lambda v: f"{v:g}") -> str:
        def pct(v: float) -> str:
            return f"{(v - self.base) / self.base * 100:+.1f} %" if self.base else "n/a"

        text = (f"{fmt(self.base)} at warm-up, last half {fmt(self.lowest)} to {fmt(self.highest)}; highest "
                f"{pct(self.highest)} in row {self.highest_index + 1} (allowed +{fmt(self.allowed)})")
        if self.fell:
            text += f"; fell to {fmt(self.lowest)} in row {self.lowest_index + 1} ({pct(self.lowest)})"
        return text


def judge_flat(name: str, values: list[float], base_index: int, judged: list[int],
               tolerance: float = TOLERANCE, slack: float = 0.0) -> Judgement:
    """The issue's rule, "the last half within 10 % of the first sample after warm-up", read as a
    soak reads it: met when no judged row is more than ``tolerance`` above the base (growth is what
    a leak looks like). A fall beyond it is reported (Judgement.fell), not counted as a miss: a
    pooled connection closed by a broker restart or a worker kill is reopened only when next
    needed. ``slack`` is an absolute floor on the allowed distance, for a figure whose base is
    about zero (the outbox)."""
    base = values[base_index]
    allowed = max(tolerance * abs(base), slack)
    highest = max(judged, key=lambda i: (values[i], i))
    lowest = min(judged, key=lambda i: (values[i], i))
    return Judgement(name, values[highest] <= base + allowed, base, values[highest], highest, values[lowest], lowest,
                     allowed)


@dataclass
class Verdict:
    """What the run found: each target with whether it was met and one line of evidence."""

    targets: list[tuple[str, bool, str]] = field(default_factory=list)

    def add(self, name: str, ok: bool, evidence: str) -> None:
        self.targets.append((name, ok, evidence))

    @property
    def missed(self) -> list[str]:
        return [name for name, ok, _ in self.targets if not ok]

    @property
    def ok(self) -> bool:
        return not self.missed

    def lines(self) -> list[str]:
        return [f"  {'met   ' if ok else 'MISSED'} {name}: {evidence}" for name, ok, evidence in self.targets]


def clock(seconds: float) -> str:
    """Minutes and seconds since the load started: 5:00, 37:30."""
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def count(value: float) -> str:
    return f"{value:,.1f}".removesuffix(".0")


def human_bytes(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"

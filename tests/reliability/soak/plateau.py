"""The messages table's plateau, judged as PostgreSQL keeps a table: the heap and the indexes apart,
each against the vacuum passes that ran over it. Pure (no I/O): the soak records one sample a row
(the relation's size, the live rows, the vacuum passes completed so far) and these functions judge
the series, so they can be unit-tested with synthetic ones.

Why not the total size against a fixed tolerance: a relation's file never shrinks under load. When
autovacuum lags (a busy machine, a burst after a broker outage), dead row versions hold their pages,
new rows take new ones, and the size steps up; once a vacuum pass has freed the dead versions, their
space is reused and the size stays where the burst left it. That is bounded, and a rule on the size
alone reads the step as growth. A leak differs in kind: the relation keeps taking new pages after
every vacuum pass, at the end of one cycle after another, while the live rows stay steady.

The rule, per relation, from the first row after the warm-up (the base):

- a *cycle end* is a row before which at least one vacuum pass completed (autovacuum's, or the
  soak's own VACUUM, which it runs before the base row, the row halfway from there and the last);
- the relation *grew across cycles* when each of its last ``settle + 1`` cycle ends set a new
  high-water mark (above every earlier row) and the last stands more than ``tolerance`` above the
  mark before them (scaled by the live rows, should those have grown); ``settle`` is how many
  passes it takes before freed space is reused: 1 for the heap, 2 for a b-tree (a page emptied by
  one pass is recycled after the next);
- that *cross-cycle* rule applies once ``settle + 1`` complete cycles followed the base; in a run
  with fewer (a short run, autovacuum held back), only the bound is judged, and the verdict says so;
- the *bound* applies always: no row after the base above ``bound`` times the base (nor the live
  rows), a ceiling no lag explains (the worst measured: +26 % in 3 minutes, +16 % in an hour)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

HEAP_SETTLE = 1  # space a pass frees in the heap is reused by the next inserts
INDEX_SETTLE = 2  # a b-tree page emptied by one pass is recycled only after the next one
BOUND = 2.0  # no relation (nor the live rows) above twice its size at the base row


def passes_before(vacuums: Sequence[int]) -> list[bool]:
    """Per row: whether a vacuum pass completed since the row before (``vacuums``: passes so far,
    manual and automatic; the first row counts any pass at all)."""
    return [v > (vacuums[i - 1] if i else 0) for i, v in enumerate(vacuums)]


def cycle_ends(vacuums: Sequence[int], base_index: int) -> list[int]:
    """The rows at or after the base before which a vacuum pass completed."""
    return [i for i, passed in enumerate(passes_before(vacuums)) if passed and i >= base_index]


@dataclass(frozen=True)
class Bound:
    """Every row from the base on at most ``factor`` times the base."""

    name: str
    ok: bool
    base: float
    factor: float
    highest: float
    highest_index: int

    @property
    def ceiling(self) -> float:
        return self.factor * self.base

    def describe(self, fmt: Callable[[float], str] = lambda v: f"{v:g}") -> str:
        rise = f" ({(self.highest - self.base) / self.base * 100:+.1f} %)" if self.base else ""
        return (f"{fmt(self.base)} at warm-up, highest after it {fmt(self.highest)}{rise} in row "
                f"{self.highest_index + 1}, ceiling {self.factor:g}x = {fmt(self.ceiling)}")


def judge_bound(name: str, values: Sequence[float], base_index: int, factor: float = BOUND) -> Bound:
    highest = max(range(base_index, len(values)), key=lambda i: (values[i], i))
    base = values[base_index]
    return Bound(name, values[highest] <= factor * base, base, factor, values[highest], highest)


@dataclass(frozen=True)
class Plateau:
    """One relation (the heap, the indexes) judged against its vacuum cycles."""

    name: str
    bound: Bound
    ends: tuple[int, ...]  # cycle ends from the base on
    settle: int
    tolerance: float
    growing: bool  # the cross-cycle rule found growth (False when it did not apply)
    grew: float | None  # growth over the judged cycles against the mark before them; None: rule not applied
    allowed: float | None  # the tolerance, scaled by the live rows' growth over the same cycles
    mark: float | None  # the high-water mark before the judged cycles
    new_highs: int = 0  # of the judged cycle ends, how many set a new high-water mark

    @property
    def cycles(self) -> int:
        """Complete vacuum cycles after the warm-up (between two cycle ends)."""
        return max(0, len(self.ends) - 1)

    @property
    def needed(self) -> int:
        return self.settle + 1

    @property
    def rule(self) -> str:
        return "across cycles" if self.grew is not None else "bound only"

    @property
    def ok(self) -> bool:
        return self.bound.ok and not self.growing

    def describe(self, fmt: Callable[[float], str] = lambda v: f"{v:g}") -> str:
        if self.grew is None:
            head = (f"bound only: {self.cycles} complete vacuum cycle{'s' if self.cycles != 1 else ''} after warm-up, "
                    f"the cross-cycle rule needs {self.needed}")
        else:
            verdict = "GREW" if self.growing else "bounded"
            head = (f"across cycles, {verdict}: {self.cycles} complete vacuum cycles after warm-up; of the last "
                    f"{self.needed} cycle ends {self.new_highs} set a new high-water mark, the last "
                    f"{self.grew * 100:+.1f} % against the mark before them ({fmt(self.mark)}; allowed "
                    f"{self.allowed * 100:+.0f} %)")
        return f"{head}; {self.bound.describe(fmt)}"


def judge_plateau(name: str, sizes: Sequence[float], live: Sequence[float], vacuums: Sequence[int],
                  base_index: int, *, settle: int = HEAP_SETTLE, tolerance: float = 0.10,
                  bound: float = BOUND) -> Plateau:
    """``sizes``, ``live`` and ``vacuums`` (passes completed so far) per row; see the module's rule."""
    ends = cycle_ends(vacuums, base_index)
    needed = settle + 1
    ceiling = judge_bound(name, sizes, base_index, bound)
    if len(ends) - 1 < needed:
        return Plateau(name, ceiling, tuple(ends), settle, tolerance, False, None, None, None)
    before, judged = ends[-needed - 1], ends[-needed:]
    mark = max(sizes[base_index:before + 1])
    new_highs = sum(sizes[e] > max(sizes[base_index:e]) for e in judged)
    live_then = max(max(live[base_index:before + 1]), 1)
    allowed = (1 + tolerance) * max(1.0, live[judged[-1]] / live_then) - 1
    grew = sizes[judged[-1]] / mark - 1 if mark else 0.0
    growing = new_highs == needed and grew > allowed
    return Plateau(name, ceiling, tuple(ends), settle, tolerance, growing, grew, allowed, mark, new_highs)


def series(values: Sequence[float], vacuums: Sequence[int], base_index: int,
           fmt: Callable[[float], str] = lambda v: f"{v:g}") -> str:
    """The values row by row: ``*`` after a row before which a vacuum pass completed, ``|`` before
    the base row (the warm-up ends)."""
    marks = passes_before(vacuums)
    cells = [("| " if i == base_index and i else "") + fmt(v) + ("*" if marks[i] else "")
             for i, v in enumerate(values)]
    return " ".join(cells)

"""Counts that stay bounded as history grows: exact up to a cap, PostgreSQL's estimate above it.
Generic (a queryset in, a count out): the admin's lists, the bulk actions and the dashboard share them."""

from __future__ import annotations

import json

from django.db import connection

# --- counts that stay bounded: exact up to a cap, PostgreSQL's estimate above it ----------------


class Tally(int):
    """A count: exact, PostgreSQL's estimate (``exact`` False), or a floor (``floor``: more than
    value - 1, where no estimate is worth showing); shows as "1,234", "≈ 1,234" or "> 10,000"."""

    exact: bool
    floor: bool

    def __new__(cls, value: int, exact: bool = True, floor: bool = False):
        tally = super().__new__(cls, value)
        tally.exact, tally.floor = exact and not floor, floor
        return tally

    def __str__(self) -> str:
        if self.floor:
            return f"> {int(self) - 1:,}"
        return f"{int(self):,}" if self.exact else f"≈ {int(self):,}"

    def __repr__(self) -> str:
        return f"Tally({int(self)}, exact={self.exact}, floor={self.floor})"


def queryset_estimate(*, queryset) -> int:
    """How many rows the planner expects ``queryset`` to have (EXPLAIN, nothing is read):
    PostgreSQL's statistics, scaled to the table's current size."""
    sql, params = queryset.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return int(plan[0]["Plan"]["Plan Rows"])


def queryset_tally(*, querysets: dict, cap: int, estimates: dict | None = None, floors=()) -> dict:
    """Key -> Tally of each queryset: its rows counted no further than cap + 1 (all in one
    statement), exact when at most ``cap``; above, PostgreSQL's estimate (never below cap + 1).
    ``estimates``: known estimates by key (statistics); a key whose estimate is above ``cap`` is
    not counted at all (finished statuses: their counts only grow with history). ``floors``:
    keys shown as "more than cap" instead (the planner has no statistics for due_at < created_at
    and guesses a third of the table)."""
    estimates = estimates or {}
    counted = {key: qs for key, qs in querysets.items() if (estimates.get(key) or 0) <= cap}
    found = {}
    if counted:
        parts, params = [], []
        for qs in counted.values():
            sql, part_params = qs.order_by().values("pk")[:cap + 1].query.sql_with_params()
            parts.append(f"(SELECT count(*) FROM ({sql}) AS capped)")
            params += part_params
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {', '.join(parts)}", params)
            found = dict(zip(counted, cursor.fetchone()))
    result = {}
    for key, qs in querysets.items():
        n = found.get(key)
        if n is not None and n <= cap:
            result[key] = Tally(n)
        elif key in floors:
            result[key] = Tally(cap + 1, floor=True)
        else:
            estimate = estimates.get(key)
            result[key] = Tally(max(cap + 1, estimate if estimate is not None else queryset_estimate(queryset=qs)),
                                 exact=False)
    return result

"""Which waiting webhook call starts next when the calls in flight are at their limit: round
robin over teams, then over each team's endpoints (deficit round robin with every call costing one
is round robin), skipping an endpoint at its bulkhead or paused. Work-conserving: one busy
endpoint alone gets every free slot. Pure: no clock, no I/O.

Why two levels: a team with a hundred endpoints must not get a hundred shares against a team with
one; and why skip rather than block: pg-boss's per-group fairness shipped with head-of-line
blocking (its PR #756), the first call of a full group holding up every group behind it."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass
class _Endpoint:
    team: Hashable
    limit: int  # calls in flight at most (the bulkhead)
    waiting: deque = field(default_factory=deque)
    running: int = 0
    paused: bool = False


class FairQueue:
    def __init__(self):
        self._endpoints: dict[Hashable, _Endpoint] = {}
        # teams with waiting calls, in turn order; each with its endpoints with waiting calls, in turn order
        self._turns: OrderedDict[Hashable, OrderedDict[Hashable, None]] = OrderedDict()

    def __len__(self) -> int:
        return sum(len(e.waiting) for e in self._endpoints.values())

    def push(self, endpoint: Hashable, team: Hashable, item, *, limit: int) -> None:
        state = self._endpoints.get(endpoint)
        if state is None:
            state = self._endpoints[endpoint] = _Endpoint(team, limit)
        state.limit = limit
        state.waiting.append(item)
        self._turns.setdefault(team, OrderedDict()).setdefault(endpoint, None)

    def pop(self):
        """The next call to start (its endpoint counts it running), or None when every endpoint
        with waiting calls is at its limit or paused."""
        for team in list(self._turns):
            endpoints = self._turns[team]
            for endpoint in list(endpoints):
                state = self._endpoints[endpoint]
                if state.paused or state.running >= state.limit:
                    continue
                item = state.waiting.popleft()
                state.running += 1
                endpoints.move_to_end(endpoint)  # its next turn after the team's other endpoints
                if not state.waiting:
                    del endpoints[endpoint]
                self._turns.move_to_end(team)  # and the team's after the other teams
                if not endpoints:
                    del self._turns[team]
                return item
        return None

    def done(self, endpoint: Hashable) -> None:
        """A call of ``endpoint`` ended: its slot is free again."""
        state = self._endpoints.get(endpoint)
        if state is None:
            return
        state.running = max(0, state.running - 1)
        self._forget_if_idle(endpoint, state)

    def running(self, endpoint: Hashable) -> int:
        state = self._endpoints.get(endpoint)
        return 0 if state is None else state.running

    def queued(self, endpoint: Hashable) -> int:
        """Waiting and running calls of ``endpoint``."""
        state = self._endpoints.get(endpoint)
        return 0 if state is None else state.running + len(state.waiting)

    def set_paused(self, endpoint: Hashable, paused: bool) -> list:
        """Pause or resume an endpoint; pausing takes its waiting calls out (returned), since they
        would wait longer than their lease."""
        state = self._endpoints.get(endpoint)
        if state is None:
            return []
        state.paused = paused
        if not paused:
            return []
        taken = list(state.waiting)
        state.waiting.clear()
        team_turns = self._turns.get(state.team)
        if team_turns is not None:
            team_turns.pop(endpoint, None)
            if not team_turns:
                del self._turns[state.team]
        self._forget_if_idle(endpoint, state)
        return taken

    def take_all(self) -> list:
        """Every waiting call, taken out (the engine is stopping)."""
        taken = [item for state in self._endpoints.values() for item in state.waiting]
        for state in self._endpoints.values():
            state.waiting.clear()
        self._turns.clear()
        return taken

    def _forget_if_idle(self, endpoint: Hashable, state: _Endpoint) -> None:
        if not state.running and not state.waiting and not state.paused:
            del self._endpoints[endpoint]  # bounded by the endpoints with calls, not by all there were

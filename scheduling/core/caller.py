"""Who is asking: a person (session or a key acting as them), a team's API key, a command, or the
platform itself. Every scoped read and every check of the API, the admin and the commands asks
a Caller, built once per request (teams/selectors.py): no edge remembers a filter of its own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduling.core.roles import ALL_SCOPES, Action, role_allows


@dataclass(frozen=True)
class Caller:
    name: str  # what the audit log and messages show: "alice", "key dpk_AbCd1234", "command create_team"
    user_id: int | None = None
    key_id: int | None = None
    key_prefix: str = ""
    operator: bool = False  # a superuser, a command run on the host, or the platform itself
    roles: Mapping[int, str] = field(default_factory=dict)  # team id -> role
    scopes: frozenset[str] = ALL_SCOPES  # a key's; a person's session has every scope
    person: bool = True  # False: a team's API key, which never manages keys or members

    def may(self, action: Action, team_id: int | None) -> bool:
        """Whether this caller may do ``action`` in the team (None: a platform-wide thing)."""
        if action.scope is None and not self.person:
            return False
        if action.scope is not None and action.scope not in self.scopes:
            return False
        if self.operator:
            return True
        return team_id is not None and role_allows(self.roles.get(team_id), action)

    def team_ids(self, action: Action = Action.READ) -> frozenset[int] | None:
        """The teams this caller may do ``action`` in; None: every team (an operator)."""
        if self.operator:
            return None if self.may(action, None) else frozenset()
        return frozenset(team for team in self.roles if self.may(action, team))

    def team_ids_any(self, *actions: Action) -> frozenset[int] | None:
        """The teams where this caller may do any of ``actions``; None: every team."""
        found: set[int] = set()
        for action in actions:
            teams = self.team_ids(action)
            if teams is None:
                return None
            found |= teams
        return frozenset(found)

    @property
    def member_of(self) -> frozenset[int]:
        return frozenset(self.roles)


PLATFORM = Caller(name="platform", operator=True)  # the platform's own work (beat, DelayedTask)


def caller_for_command(name: str) -> Caller:
    """A management command runs on the host: an operator (``--team`` narrows what it touches)."""
    return Caller(name=f"command {name}", operator=True)

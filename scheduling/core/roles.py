"""Who may do what in a team: a member's role, an API key's scopes, and the action each request
is. Pure: the API, the admin and the commands ask :class:`Caller` (core/caller.py), which asks
this table, so no edge spells a rule of its own."""

from __future__ import annotations

import enum
from collections.abc import Iterable

VIEWER, MEMBER, ADMIN = "viewer", "member", "admin"
ROLES = (VIEWER, MEMBER, ADMIN)
RANK = {VIEWER: 1, MEMBER: 2, ADMIN: 3}
ROLE_HELP = {
    VIEWER: "reads the team's endpoints, messages, schedules and reports",
    MEMBER: "a viewer who also schedules, reschedules, cancels and republishes messages and keeps schedules",
    ADMIN: "a member who also manages the team's endpoints, webhook secrets, API keys and members, "
           "and reads its audit log",
}

# An API key's scopes: what a key may do at most (a team key's whole rights; a user's key is also
# bounded by the user's roles).
SCOPES = {
    "read": "read endpoints, messages, schedules and the team",
    "write": "schedule and reschedule messages",
    "cancel": "cancel and republish messages, one or in bulk",
    "schedules": "create, change, pause, resume and delete recurring schedules",
    "endpoints": "create and change endpoints, flow control and webhook secrets",
    "tasks": "send Celery tasks (to celery_queue endpoints, within the team's allowlist)",
    "audit": "read the team's audit log",
}
ALL_SCOPES = frozenset(SCOPES)


class Action(enum.Enum):
    """(least role, scope a key needs): None as the scope means people only, never a team key."""

    READ = (VIEWER, "read")
    SCHEDULE = (MEMBER, "write")
    CANCEL = (MEMBER, "cancel")
    SCHEDULES = (MEMBER, "schedules")
    TASKS = (MEMBER, "tasks")
    ENDPOINTS = (ADMIN, "endpoints")
    AUDIT = (ADMIN, "audit")
    KEYS = (ADMIN, None)
    MEMBERS = (ADMIN, None)

    def __init__(self, role: str, scope: str | None) -> None:
        self._role, self._scope = role, scope

    @property
    def role(self) -> str:
        return self._role

    @property
    def scope(self) -> str | None:
        return self._scope


def role_allows(role: str | None, action: Action) -> bool:
    return role is not None and RANK[role] >= RANK[action.role]


def parse_scopes(words: Iterable[object]) -> frozenset[str]:
    """Scope names (``all`` for every one) -> the set; ValueError naming an unknown one."""
    chosen: set[str] = set()
    for word in words:
        word = str(word).strip().lower()
        if word == "all":
            chosen |= ALL_SCOPES
        elif word in SCOPES:
            chosen.add(word)
        else:
            raise ValueError(f"unknown scope {word!r}; scopes: all, {', '.join(SCOPES)}")
    if not chosen:
        raise ValueError(f"give at least one scope (all, {', '.join(SCOPES)})")
    return frozenset(chosen)

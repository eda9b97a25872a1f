"""The API's caller: who a request is (a person's session, a key acting as a person, a team's key),
built once per request and handed to every selector and service the view calls."""

from __future__ import annotations

from scheduling.audit.context import audit_context
from scheduling.core.caller import Caller
from scheduling.models import ApiKey
from scheduling.teams.authentication import TeamKeyUser
from scheduling.teams.selectors import caller_for_team_key, caller_for_user

_ATTRIBUTE = "_dp_caller"


def request_caller(request) -> Caller:
    caller = getattr(request, _ATTRIBUTE, None)
    if caller is None:
        key = request.auth if isinstance(request.auth, ApiKey) else None
        if isinstance(request.user, TeamKeyUser):
            caller = caller_for_team_key(key=request.user.key)
        else:
            caller = caller_for_user(user=request.user, key=key)
        setattr(request, _ATTRIBUTE, caller)
        context = audit_context()
        if context is not None:
            context.caller = caller
    return caller


def request_team_name(request) -> str | None:
    """The team a request names: ``?team=`` or a ``team`` field of a JSON object body."""
    name = request.query_params.get("team")
    if not name and request.method in ("POST", "PATCH", "PUT"):
        data = getattr(request, "_full_data", None)  # only if the view parsed it already
        if isinstance(data, dict) and isinstance(data.get("team"), str):
            name = data["team"]
    return name or None

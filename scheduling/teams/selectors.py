"""Reads of teams, members and keys, and the one place a queryset is narrowed to a caller's teams
(``queryset_for_caller``): the API, the admin and the commands start every read from it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet, Subquery
from django.utils import timezone

from scheduling.core.caller import Caller
from scheduling.core.errors import Forbidden
from scheduling.core.roles import ALL_SCOPES, Action
from scheduling.core.text import has_nul
from scheduling.models import Endpoint
from scheduling.models.teams import DEFAULT_TEAM, ApiKey, Invitation, Membership, Team, default_team_id

# How each model reaches its team. A message belongs to its endpoint's team.
_TEAM_COLUMN = {
    "Team": "id", "Membership": "team_id", "ApiKey": "team_id", "Endpoint": "team_id", "Schedule": "team_id",
    "BulkAction": "team_id", "AuditEvent": "team_id", "DeliveryMinute": "team_id", "Invitation": "team_id",
    "OrphanCopy": "team_id", "NotificationRoute": "team_id",
    "Subscription": "team_id", "Event": "team_id",  # issue 48: fan-out
}
M = TypeVar("M", bound=Model)


def caller_for_user(*, user: User | AnonymousUser, key: ApiKey | None = None) -> Caller:
    """A person (their session, or a key acting as them): their roles, one query."""
    roles = {} if user.pk is None else dict(Membership.objects.filter(user_id=user.pk).values_list("team_id", "role"))
    name = user.get_username()
    if key is not None:
        return Caller(name=f"{name} (key {key.prefix})", user_id=user.pk, key_id=key.pk, key_prefix=key.prefix,
                      operator=user.is_superuser, roles=roles, scopes=frozenset(key.scopes) & ALL_SCOPES)
    return Caller(name=name, user_id=user.pk, operator=user.is_superuser, roles=roles)


def caller_for_team_key(*, key: ApiKey) -> Caller:
    """A team's key: every right its scopes name, in its team only; never keys or members."""
    if key.team_id is None:
        raise ValueError(f"key {key.prefix} is a person's: it acts as them (caller_for_user)")
    return Caller(name=f"key {key.prefix}", key_id=key.pk, key_prefix=key.prefix, roles={key.team_id: "admin"},
                  scopes=frozenset(key.scopes) & ALL_SCOPES, person=False)


def queryset_for_caller(*, queryset: QuerySet[M], caller: Caller, action: Action = Action.READ,
                        also: Action | None = None) -> QuerySet[M]:
    """``queryset`` narrowed to the teams where ``caller`` may do ``action`` (or ``also``; nothing
    when none). Messages through their endpoints' ids (a subquery PostgreSQL runs once), so their
    indexes serve the list as before."""
    teams = caller.team_ids_any(action, *([also] if also else []))
    if teams is None:
        return queryset
    model = queryset.model._meta.concrete_model
    assert model is not None  # a queryset's model is a model: concrete itself or a proxy of one
    if model.__name__ == "ScheduledMessage":
        return queryset.filter(endpoint_id__in=Subquery(Endpoint.objects.filter(team_id__in=teams).values("id")))
    if model.__name__ == "AccuracyReport":
        return queryset.filter(team__in=Team.objects.filter(id__in=teams).values("name"))
    return queryset.filter(**{f"{_TEAM_COLUMN[model.__name__]}__in": teams})


def team_list_for_caller(*, caller: Caller, action: Action = Action.READ) -> QuerySet[Team]:
    return queryset_for_caller(queryset=Team.objects.all(), caller=caller, action=action)


def team_get_by_name(*, name: str) -> Team | None:
    return Team.objects.filter(name=name).first()


def team_pick(*, caller: Caller, action: Action, name: str | None = None) -> Team:
    """The team a request acts in: the one named (among those the caller may act in), else the
    only one it may act in; else a ValidationError on ``team`` (name one), or Forbidden (none)."""
    allowed = team_list_for_caller(caller=caller, action=action)
    if name == DEFAULT_TEAM and caller.operator:  # made on first use, as rows without a team are
        return Team.objects.get(pk=default_team_id())
    if name:
        team = allowed.filter(name=name).first() if isinstance(name, str) and not has_nul(name) else None
        if team is None:  # the same answer whether the team exists or not
            raise ValidationError({"team": f"no team {name!r} that you may do this in"})
        return team
    teams = list(allowed.order_by("name")[:6])
    if len(teams) == 1:
        return teams[0]
    if not teams and caller.operator:  # no team yet: the platform's first, the default team
        return Team.objects.get(pk=default_team_id())
    if not teams:
        raise Forbidden("you may not do this in any team")
    listed = ", ".join(t.name for t in teams[:5]) + (", ..." if len(teams) > 5 else "")
    raise ValidationError({"team": f"you may do this in several teams ({listed}): name one"})


def membership_list(*, team_ids: Iterable[int] | None = None) -> QuerySet[Membership]:
    rows = Membership.objects.select_related("team", "user").order_by("team__name", "user__username")
    return rows if team_ids is None else rows.filter(team_id__in=team_ids)


def api_key_find(*, prefix: str) -> list[ApiKey]:
    """The keys that start with ``prefix`` (usually one), with their team and user."""
    return list(ApiKey.objects.select_related("team", "user", "parent__user").filter(prefix=prefix)[:10])


def api_key_list_of_user(*, user: User | AnonymousUser) -> QuerySet[ApiKey]:
    """A person's own keys (those acting as them), newest first; nobody's (anonymous): none."""
    if user.pk is None:
        return ApiKey.objects.none()
    return ApiKey.objects.select_related("user").filter(user_id=user.pk).order_by("-created_at", "-id")


def invitation_list(*, team_ids: Iterable[int]) -> QuerySet[Invitation]:
    """The invitations of these teams, newest first."""
    return Invitation.objects.select_related("team").filter(team_id__in=team_ids).order_by("-created_at", "-id")


def invitation_list_for_user(*, user: User | AnonymousUser) -> QuerySet[Invitation]:
    """The invitations a person may still answer: theirs, pending, not expired; nobody's
    (anonymous): none, never those of unknown names (no user)."""
    if user.pk is None:
        return Invitation.objects.none()
    return (Invitation.objects.select_related("team")
            .filter(user_id=user.pk, state=Invitation.State.PENDING, expires_at__gt=timezone.now())
            .order_by("-created_at", "-id"))

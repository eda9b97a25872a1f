"""Teams, members and API keys: create and change them, each change audited in its transaction."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduling.audit import actions
from scheduling.audit.services import audit_changed, audit_record, audit_values
from scheduling.config.conf import conf, setting_name
from scheduling.core.durations import format_duration
from scheduling.core.errors import Conflict, NotFound
from scheduling.core.roles import ADMIN, RANK, ROLES, parse_scopes
from scheduling.models import ApiKey, Membership, Team
from scheduling.teams.keys import key_digest, key_generate, key_matches, key_prefix

LAST_USED_EVERY = timedelta(minutes=1)  # a key's last use is written at most this often


def team_create(*, name: str, **quotas: object) -> Team:
    team = Team(name=name, **quotas)
    team.full_clean()
    try:
        with transaction.atomic():
            team.save()
            audit_record(action=actions.TEAM_CREATE, obj=team, team=team, after=audit_values(obj=team))
    except IntegrityError:
        raise ValidationError({"name": f"a team {name!r} exists already"}) from None
    return team


TEAM_SETTINGS = ("max_in_flight", "max_in_flight_bytes", "max_schedules", "max_endpoints",
                 "min_schedule_interval_seconds", "api_rate", "key_api_rate", "celery_task_allowlist",
                 "webhook_allowed_networks")


def team_update(*, team: Team, **changes: object) -> Team:
    """An operator's change of a team's quotas and grants (checked as the settings they override)."""
    from scheduling.teams.quotas import team_check_settings

    unknown = set(changes) - set(TEAM_SETTINGS)
    if unknown:
        raise ValidationError({name: "cannot be changed here" for name in unknown})
    with transaction.atomic():
        current = Team.objects.select_for_update().get(pk=team.pk)
        before = audit_values(obj=current)
        for name, value in changes.items():
            setattr(current, name, value)
        current.full_clean()
        team_check_settings(team=current)
        current.save()
        old, new = audit_changed(before=before, after=audit_values(obj=current))
        if new:
            audit_record(action=actions.TEAM_UPDATE, obj=current, team=current, before=old, after=new)
    return current


def membership_set(*, team: Team, username: str, role: str, add: bool = False) -> Membership:
    """Change a member's role; with ``add`` (an operator: a superuser, a command) also add a user
    who is not one. Without it, a name that is not a member is refused with one answer whether the
    user exists or not: people join by accepting an invitation (invitations.py)."""
    if role not in ROLES:
        raise ValidationError({"role": f"must be {', '.join(ROLES)}"})
    user = get_user_model().objects.filter(username=username).first() if isinstance(username, str) else None
    if not add and (user is None or not Membership.objects.filter(team=team, user=user).exists()):
        raise ValidationError({"username": f"{username!r} is not a member of {team.name}: invite them "
                                           f"(POST /api/teams/{team.name}/invitations/)"})
    if user is None:
        raise ValidationError({"username": f"no user {username!r}"})
    with transaction.atomic():
        return membership_put(team=team, user=user, role=role)


def membership_put(*, team: Team, user: User, role: str) -> Membership:
    """The user a member with ``role`` (added, or their role changed), audited; inside the caller's
    transaction. A member who is no longer an admin loses the team keys made with their keys."""
    membership, created = Membership.objects.select_for_update().get_or_create(
        team=team, user=user, defaults={"role": role})
    before = None if created else {"role": membership.role}
    if not created and membership.role != role:
        membership.role = role
        membership.save(update_fields=["role"])
    if created or before != {"role": role}:
        audit_record(action=actions.MEMBER_ADD if created else actions.MEMBER_CHANGE, obj=membership, team=team,
                     before=before, after={"user": user.get_username(), "role": role})
    if RANK[role] < RANK[ADMIN]:
        api_key_revoke_minted(team=team, user=user)
    return membership


def membership_remove(*, team: Team, username: str) -> None:
    """Take a user out of the team; the team keys made with their keys are revoked with it."""
    with transaction.atomic():
        membership = (Membership.objects.select_for_update(of=("self",)).select_related("user")
                      .filter(team=team, user__username=username).first())
        if membership is None:
            raise NotFound(f"{username!r} is not a member of {team.name}")
        audit_record(action=actions.MEMBER_REMOVE, obj=membership, team=team,
                     before={"user": username, "role": membership.role})
        api_key_revoke_minted(team=team, user=membership.user)
        membership.delete()


@dataclass(frozen=True)
class NewKey:
    row: ApiKey
    key: str  # shown once: only its digest is kept


def _expiry(expires_in: timedelta | None) -> datetime:
    settings = conf()
    expires_in = settings.api_key_expires if expires_in is None else expires_in
    if expires_in <= timedelta(0):
        raise ValidationError({"expires_in": "must be a positive duration"})
    if expires_in > settings.api_key_max_expires:
        raise ValidationError({"expires_in": f"is longer than the longest a key may last, "
                                             f"{format_duration(settings.api_key_max_expires)} "
                                             f"({setting_name('api_key_max_expires')})"})
    return timezone.now() + expires_in


def api_key_create(*, team: Team | None = None, user: User | None = None, scopes: Iterable[object] = (), name: str = "",
                   expires_in: timedelta | None = None, created_by: str = "", parent: ApiKey | None = None) -> NewKey:
    """A team's key with ``scopes``, or a user's key acting as that user (every scope; their roles
    bound it). The key is in the answer, once. ``parent``: the person's key a team key is made
    with; the new key lives no longer than it (api_key_authenticate, api_key_revoke)."""
    if (team is None) == (user is None):
        raise ValidationError({"team": "give a team or a user, not both"})
    if parent is not None and (team is None or parent.user_id is None):
        raise ValidationError({"team": "only a team's key is made with a person's key"})
    try:
        chosen = parse_scopes(scopes) if team is not None else parse_scopes(["all"])
    except ValueError as exc:
        raise ValidationError({"scopes": str(exc)}) from None
    if not isinstance(name, str) or len(name) > 100:
        raise ValidationError({"name": "must be text of at most 100 characters"})
    key = key_generate()
    row = ApiKey(team=team, user=user, name=name, prefix=key_prefix(key), digest=key_digest(key),
                 scopes=sorted(chosen), expires_at=_expiry(expires_in), created_by=created_by[:200], parent=parent)
    with transaction.atomic():
        row.save()
        audit_record(action=actions.KEY_CREATE, obj=row, team=team, after=audit_values(obj=row))
    return NewKey(row, key)


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    """Revoke a key now, and the team keys made with it (each audited)."""
    with transaction.atomic():
        current = ApiKey.objects.select_for_update().get(pk=key.pk)
        if current.revoked_at is not None:
            raise Conflict(f"key {current.prefix} was revoked already")
        _revoke(current)
        for child in ApiKey.objects.select_for_update().filter(parent=current, revoked_at__isnull=True):
            _revoke(child)
    return current


def _revoke(key: ApiKey) -> None:
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    audit_record(action=actions.KEY_REVOKE, obj=key, team=key.team, after={"revoked_at": key.revoked_at})


def api_key_revoke_minted(*, team: Team, user: User) -> int:
    """Revoke the team's live keys made with ``user``'s keys (they leave the team, or are no
    longer its admin); inside the caller's transaction. How many."""
    minted = list(ApiKey.objects.select_for_update().select_related("team")
                  .filter(team=team, parent__user=user, revoked_at__isnull=True))
    for key in minted:
        _revoke(key)
    return len(minted)


def api_key_authenticate(*, key: str, legacy: bool = False) -> tuple[ApiKey | None, str]:
    """The live key this text is, or (None, why not): unknown, revoked or expired. ``legacy``: the
    ``Token`` scheme, which only keys migrated from DRF's tokens answer to. Records its use."""
    from scheduling.teams.selectors import api_key_find

    if not isinstance(key, str) or not 8 <= len(key) <= 200:
        return None, "invalid key"
    found = next((row for row in api_key_find(prefix=key_prefix(key)) if key_matches(key, row.digest)), None)
    if found is None or (legacy and not found.legacy_token):
        return None, "invalid key"
    now = timezone.now()
    if found.revoked_at is not None:
        return None, "this key was revoked"
    if found.expires_at <= now:
        return None, "this key has expired"
    if found.user_id is not None and (found.user is None or not found.user.is_active):
        return None, "this key's user is inactive"
    if found.parent_id is not None:  # made with a person's key: it lives no longer than that key
        parent = found.parent  # selected with it (api_key_find): no query
        if (parent is None or parent.revoked_at is not None or parent.expires_at <= now or parent.user is None
                or not parent.user.is_active):
            return None, "the key this key was made with is no longer valid"
    if found.last_used_at is None or found.last_used_at < now - LAST_USED_EVERY:
        ApiKey.objects.filter(pk=found.pk).update(last_used_at=now)
        found.last_used_at = now
    return found, ""

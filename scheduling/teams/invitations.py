"""Invitations: the one way a person joins a team (besides an operator adding them). A team
admin invites a username with a role; the user it names accepts (then is a member) or declines,
before DELAY_INVITATION_EXPIRES. Inviting answers the same whether the name is a user or not (a
row is kept for either; one of an unknown name is never accepted), so team admins cannot probe
the platform's usernames. Each change audited in its transaction."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from scheduling.audit import actions
from scheduling.audit.services import audit_record
from scheduling.config.conf import conf, setting_name
from scheduling.core.errors import Conflict, NotFound, QuotaExceeded
from scheduling.core.roles import ROLES
from scheduling.models import Invitation, Membership, Team
from scheduling.teams.quotas import team_lock_counts
from scheduling.teams.services import membership_put

State = Invitation.State


def invitation_create(*, team: Team, username: str, role: str, invited_by: str = "") -> Invitation:
    """Invite ``username`` to the team with ``role`` (replacing a pending invitation of the same
    name). Refused only for what the team admin sees anyway: a name that is already a member."""
    if role not in ROLES:
        raise ValidationError({"role": f"must be {', '.join(ROLES)}"})
    if not isinstance(username, str) or not username or len(username) > 150:
        raise ValidationError({"username": "the username to invite, at most 150 characters"})
    user = get_user_model().objects.filter(username=username).first()
    if user is not None and Membership.objects.filter(team=team, user=user).exists():
        raise ValidationError({"username": f"{username!r} is a member of {team.name} already: change their role "
                                           f"with members/set"})
    now = timezone.now()
    with transaction.atomic():
        _check_pending(team, username, now)
        for earlier in Invitation.objects.select_for_update().filter(team=team, username=username,
                                                                     state=State.PENDING):
            _answer(earlier, State.REVOKED, actions.INVITATION_REVOKE, now=now)
        invitation = Invitation.objects.create(team=team, username=username, user=user, role=role,
                                               invited_by=invited_by[:200], created_at=now,
                                               expires_at=now + conf().invitation_expires)
        audit_record(action=actions.INVITATION_CREATE, obj=invitation, team=team,
                     after={"username": username, "role": role, "expires_at": invitation.expires_at})
    return invitation


def _check_pending(team: Team, username: str, now: datetime) -> None:
    """QuotaExceeded when the team already has DELAY_TEAM_MAX_PENDING_INVITATIONS waiting (a new
    invitation of a name replaces that name's, so it is not counted twice). Under the team's lock:
    two admins inviting at once cannot both pass the last place."""
    team_lock_counts(team_id=team.pk)
    waiting = (Invitation.objects.filter(team=team, state=State.PENDING, expires_at__gt=now)
               .exclude(username=username).count())
    limit = conf().team_max_pending_invitations
    if waiting >= limit:
        raise QuotaExceeded(f"team {team.name} has {waiting:,} invitations waiting for an answer, its limit "
                            f"({setting_name('team_max_pending_invitations')}); revoke some, or wait until they "
                            f"expire")


def invitation_forget(*, before: datetime) -> int:
    """Delete the invitations answered or expired before ``before`` (the prune calls it with the
    finished messages' cutoff): their audit rows keep what happened. The count deleted."""
    return (Invitation.objects.filter(answered_at__lt=before).delete()[0]
            + Invitation.objects.filter(state=State.PENDING, expires_at__lt=before).delete()[0])


def invitation_revoke(*, invitation: Invitation) -> Invitation:
    """A team admin takes a pending invitation back."""
    with transaction.atomic():
        current = _pending(Invitation.objects.select_for_update().select_related("team").get(pk=invitation.pk))
        _answer(current, State.REVOKED, actions.INVITATION_REVOKE)
    return current


def invitation_accept(*, invitation_id: int, user: User) -> Invitation:
    """The invited user accepts: a member of the team with the invitation's role, from now on.
    Someone else's invitation is a NotFound, as one that does not exist."""
    with transaction.atomic():
        current = _pending(_mine(invitation_id, user))
        membership_put(team=current.team, user=user, role=current.role)
        _answer(current, State.ACCEPTED, actions.INVITATION_ACCEPT)
    return current


def invitation_decline(*, invitation_id: int, user: User) -> Invitation:
    with transaction.atomic():
        current = _pending(_mine(invitation_id, user))
        _answer(current, State.DECLINED, actions.INVITATION_DECLINE)
    return current


def _mine(invitation_id: int, user: User) -> Invitation:
    found = (Invitation.objects.select_for_update().select_related("team")
             .filter(pk=invitation_id, user_id=user.pk).first()) if isinstance(invitation_id, int) else None
    if found is None:
        raise NotFound(f"no invitation {invitation_id} for you")
    return found


def _pending(invitation: Invitation) -> Invitation:
    state = invitation.shown_state()
    if state != State.PENDING:
        raise Conflict(f"invitation {invitation.pk} is {state}")
    return invitation


def _answer(invitation: Invitation, state: str, action: str, *, now: datetime | None = None) -> None:
    invitation.state, invitation.answered_at = state, now or timezone.now()
    invitation.save(update_fields=["state", "answered_at"])
    audit_record(action=action, obj=invitation, team=invitation.team, before={"state": State.PENDING},
                 after={"username": invitation.username, "role": invitation.role, "state": state})

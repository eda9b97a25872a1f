"""People join a team by accepting an invitation (team_views.TeamViewSet.invitations,
InvitationViewSet): a team admin invites a known and an unknown username with the same answer,
the invited user is no member until they accept, someone else cannot accept it, an expired one
cannot be accepted, and members/set only changes the role of a member (operators still add)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.audit import actions
from scheduling.models import AuditEvent, Invitation, Membership

pytestmark = pytest.mark.django_db


@pytest.fixture
def team_admin(api_as):
    return api_as("admin", team="growth")


def invite(client, username, role="member", team="growth"):
    return client.post(f"/api/teams/{team}/invitations/", {"username": username, "role": role}, format="json")


def test_inviting_a_known_and_an_unknown_username_answers_the_same(team_admin, django_user_model):
    django_user_model.objects.create_user("known-person", password="pw")
    known, unknown = invite(team_admin, "known-person"), invite(team_admin, "nobody-of-that-name")
    assert known.status_code == unknown.status_code == 202
    assert known.json() == {**unknown.json(), "username": "known-person"}
    listed = team_admin.get("/api/teams/growth/invitations/").json()
    assert {i["username"]: i["state"] for i in listed} == {"known-person": "pending", "nobody-of-that-name": "pending"}
    assert set(listed[0]) == set(listed[1])  # nothing in the list tells them apart either


def test_the_invited_user_is_no_member_until_they_accept(team_admin, api_as):
    invited = api_as(None)
    assert invite(team_admin, invited.user.username, role="viewer").status_code == 202
    assert not Membership.objects.filter(user=invited.user).exists()
    assert invited.get("/api/teams/growth/").status_code == 403  # in no team yet
    (mine,) = invited.get("/api/invitations/").json()["results"]
    assert (mine["team"], mine["role"], mine["state"]) == ("growth", "viewer", "pending")
    accepted = invited.post(f"/api/invitations/{mine['id']}/accept/")
    assert accepted.status_code == 200 and accepted.json()["state"] == "accepted"
    assert Membership.objects.get(user=invited.user, team__name="growth").role == "viewer"
    assert invited.get("/api/teams/growth/").json()["role"] == "viewer"
    assert invited.post(f"/api/invitations/{mine['id']}/accept/").status_code == 409  # answered already
    assert invited.get("/api/invitations/").json()["results"] == []
    audited = list(AuditEvent.objects.filter(team_name="growth").order_by("id").values_list("action", flat=True))
    assert audited == [actions.INVITATION_CREATE, actions.MEMBER_ADD, actions.INVITATION_ACCEPT]


def test_someone_else_cannot_accept_or_decline_it(team_admin, api_as, team_key):
    invited, other = api_as(None), api_as(None)
    invite(team_admin, invited.user.username)
    invitation = Invitation.objects.get(username=invited.user.username)
    assert other.get("/api/invitations/").json()["results"] == []
    for answer in ("accept", "decline"):
        assert other.post(f"/api/invitations/{invitation.pk}/{answer}/").status_code == 404
        assert team_admin.post(f"/api/invitations/{invitation.pk}/{answer}/").status_code == 404
    assert team_key("growth").post(f"/api/invitations/{invitation.pk}/accept/").status_code == 403
    assert not Membership.objects.filter(user__in=[invited.user, other.user]).exists()
    assert Invitation.objects.get(pk=invitation.pk).state == Invitation.State.PENDING


def test_an_expired_invitation_cannot_be_accepted(team_admin, api_as, settings):
    settings.DELAY_INVITATION_EXPIRES = "1h"
    invited = api_as(None)
    invite(team_admin, invited.user.username)
    invitation = Invitation.objects.get(username=invited.user.username)
    assert invitation.expires_at - invitation.created_at == timedelta(hours=1)
    Invitation.objects.filter(pk=invitation.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert invited.get("/api/invitations/").json()["results"] == []
    refused = invited.post(f"/api/invitations/{invitation.pk}/accept/")
    assert refused.status_code == 409 and "expired" in refused.json()["detail"]
    assert not Membership.objects.filter(user=invited.user).exists()
    assert team_admin.get("/api/teams/growth/invitations/").json()[0]["state"] == "expired"


def test_declined_and_revoked_invitations_make_no_member(team_admin, api_as):
    first, second = api_as(None), api_as(None)
    invite(team_admin, first.user.username)
    invite(team_admin, second.user.username)
    one = Invitation.objects.get(username=first.user.username)
    two = Invitation.objects.get(username=second.user.username)
    assert first.post(f"/api/invitations/{one.pk}/decline/").json()["state"] == "declined"
    assert team_admin.post(f"/api/teams/growth/invitations/{two.pk}/revoke/").json()["state"] == "revoked"
    assert second.post(f"/api/invitations/{two.pk}/accept/").status_code == 409
    assert not Membership.objects.filter(user__in=[first.user, second.user]).exists()


def test_a_team_admin_adds_no_one_directly_and_the_answer_is_the_same_for_any_name(team_admin, api_as,
                                                                                   django_user_model):
    django_user_model.objects.create_user("known-person", password="pw")
    url = "/api/teams/growth/members/set/"
    known = team_admin.post(url, {"username": "known-person", "role": "member"}, format="json")
    unknown = team_admin.post(url, {"username": "nobody-at-all", "role": "member"}, format="json")
    assert known.status_code == unknown.status_code == 400
    assert known.json()["username"][0].replace("known-person", "X") == unknown.json()["username"][0].replace(
        "nobody-at-all", "X")
    assert not Membership.objects.filter(user__username="known-person").exists()
    member = api_as("viewer", team="growth")  # a member's role is still the team admin's to change
    changed = team_admin.post(url, {"username": member.user.username, "role": "member"}, format="json")
    assert changed.status_code == 200 and changed.json()["role"] == "member"


def test_an_operator_still_adds_a_member_directly(api, django_user_model):
    django_user_model.objects.create_user("hired", password="pw")
    from scheduling.models import Team

    Team.objects.get_or_create(name="growth")
    added = api.post("/api/teams/growth/members/set/", {"username": "hired", "role": "admin"}, format="json")
    assert added.status_code == 200 and Membership.objects.get(user__username="hired").role == "admin"


def test_viewers_and_team_keys_cannot_invite(api_as, team_key):
    viewer = api_as("viewer", team="growth")
    assert invite(viewer, "anyone").status_code == 403
    assert invite(team_key("growth"), "anyone").status_code == 403
    assert not Invitation.objects.exists()


def test_a_team_keeps_at_most_its_limit_of_invitations_waiting(team_admin, settings):
    """Invitations grow with what team admins do, so a team has a bounded number waiting: past
    DELAY_TEAM_MAX_PENDING_INVITATIONS the next is a 403 naming the limit, nothing is stored; a name
    invited again replaces its own (not counted twice), and an expired one frees its place."""
    settings.DELAY_TEAM_MAX_PENDING_INVITATIONS = 2
    assert invite(team_admin, "first").status_code == invite(team_admin, "second").status_code == 202
    refused = invite(team_admin, "third")
    assert refused.status_code == 403 and "DELAY_TEAM_MAX_PENDING_INVITATIONS" in refused.json()["detail"]
    assert not Invitation.objects.filter(username="third").exists()
    assert invite(team_admin, "second", role="viewer").status_code == 202  # replaces its own
    Invitation.objects.filter(username="first").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert invite(team_admin, "third").status_code == 202
    assert Invitation.objects.filter(team__name="growth", state="pending").count() == 3  # one of them expired


def test_the_prune_forgets_answered_and_expired_invitations_past_the_retention(team_admin, settings, tmp_path):
    from scheduling.retention.services import message_prune

    settings.ACCURACY_REPORT_DIR = tmp_path  # the archive goes under it
    settings.DELAY_RETENTION = timedelta(days=7)
    for name in ("old-answered", "old-expired", "recent", "waiting"):
        invite(team_admin, name)
    long_ago = timezone.now() - timedelta(days=400)
    Invitation.objects.filter(username="old-answered").update(state="declined", answered_at=long_ago)
    Invitation.objects.filter(username="old-expired").update(expires_at=long_ago)
    Invitation.objects.filter(username="recent").update(state="declined", answered_at=timezone.now())
    message_prune()
    assert set(Invitation.objects.values_list("username", flat=True)) == {"recent", "waiting"}
    kept = AuditEvent.objects.filter(action=actions.INVITATION_CREATE, team_name="growth").count()
    assert kept == 4  # the audit log still says who was invited

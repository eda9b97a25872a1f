"""People's own keys and the keys they mint (team_views.OwnApiKeyViewSet, ApiKeyViewSet.create):
a person lists and revokes their own keys and no one else's; a team key made with a person's key
is refused once that key is revoked, expired or its person inactive, and is revoked when the
person leaves the team; answers that carry a key or a secret are never cached."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.models import ApiKey

pytestmark = pytest.mark.django_db


def bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def mint(person, team="growth", scopes=("read",)):
    made = person.post("/api/keys/", {"team": team, "scopes": list(scopes), "name": "ci"}, format="json")
    assert made.status_code == 201, made.content
    return made


def test_a_person_lists_and_revokes_their_own_keys_and_no_one_else_s(api_as, team_key):
    alice, bob = api_as("admin", team="growth"), api_as("admin", team="growth")
    mine = alice.get("/api/keys/mine/")
    assert mine.status_code == 200
    assert [k["prefix"] for k in mine.json()["results"]] == [alice.key.row.prefix]
    assert bob.post(f"/api/keys/mine/{alice.key.row.prefix}/revoke/").status_code == 404
    assert ApiKey.objects.get(pk=alice.key.row.pk).revoked_at is None
    assert team_key("growth").get("/api/keys/mine/").status_code == 403  # a team's key is no one's
    revoked = alice.post(f"/api/keys/mine/{alice.key.row.prefix}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    assert alice.get("/api/keys/mine/").status_code == 401  # it was the key asking


def test_a_team_key_minted_with_a_person_s_key_is_revoked_with_it(api_as):
    alice = api_as("admin", team="growth")
    made = mint(alice)
    assert made.json()["made_with"] == alice.key.row.prefix
    minted = bearer(made.json()["key"])
    assert minted.get("/api/teams/").status_code == 200
    assert alice.post(f"/api/keys/mine/{alice.key.row.prefix}/revoke/").status_code == 200
    assert minted.get("/api/teams/").status_code == 401
    assert ApiKey.objects.get(prefix=made.json()["prefix"]).revoked_at is not None


@pytest.mark.parametrize("parent_dies", ["revoked", "expired", "inactive"])
def test_authentication_refuses_a_key_whose_parent_is_no_longer_valid(api_as, parent_dies):
    """Even when only the parent's row changed (an operator, the previous release's revoke)."""
    alice = api_as("admin", team="growth")
    minted = bearer(mint(alice).json()["key"])
    if parent_dies == "revoked":
        ApiKey.objects.filter(pk=alice.key.row.pk).update(revoked_at=timezone.now())
    elif parent_dies == "expired":
        ApiKey.objects.filter(pk=alice.key.row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    else:
        alice.user.is_active = False
        alice.user.save(update_fields=["is_active"])
    refused = minted.get("/api/teams/")
    assert refused.status_code == 401 and "made with" in refused.json()["detail"]


def test_the_keys_a_person_minted_are_revoked_when_they_leave_the_team_or_stop_being_its_admin(api_as):
    owner, alice, bob = (api_as("admin", team="growth") for _ in range(3))
    alices, bobs = bearer(mint(alice).json()["key"]), bearer(mint(bob).json()["key"])
    session_made = mint(owner)  # the owner's own key is still valid: not touched by the others leaving
    assert owner.post("/api/teams/growth/members/remove/", {"username": alice.user.username},
                      format="json").status_code == 204
    assert owner.post("/api/teams/growth/members/set/", {"username": bob.user.username, "role": "member"},
                      format="json").status_code == 200
    assert alices.get("/api/teams/").status_code == 401 and bobs.get("/api/teams/").status_code == 401
    assert bearer(session_made.json()["key"]).get("/api/teams/").status_code == 200


def test_a_team_key_minted_with_a_team_key_is_impossible(team_key):
    assert team_key("growth").post("/api/keys/", {"scopes": ["read"]}, format="json").status_code == 403


def test_answers_that_carry_a_key_or_a_secret_are_never_cached(api_as, versions):
    from scheduling.models import Endpoint, Team

    alice = api_as("admin", team="growth")
    made = mint(alice)
    assert "no-store" in made["Cache-Control"]
    Endpoint.objects.create(team=Team.objects.get(name="growth"), name="hooks", queue="growth--hooks",
                            topology=versions["v3"], handler="webhook", handler_target="https://8.8.8.8/in",
                            webhook_secret="s" * 32)
    rotated = alice.post("/api/endpoints/hooks/rotate-secret/", {}, format="json")
    assert rotated.status_code == 200 and rotated.json()["webhook_secret"]
    assert "no-store" in rotated["Cache-Control"]
    assert "no-store" not in alice.get("/api/keys/mine/").get("Cache-Control", "")  # lists carry no key

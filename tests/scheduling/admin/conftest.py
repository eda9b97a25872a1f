"""Admin test fixtures: logged-in staff users with a role in a team."""

import uuid

import pytest


@pytest.fixture
def staff_client(client, django_user_model):
    """staff_client(role, team="default") -> a logged-in client for a staff user with this role in
    the team (viewer, member or admin; None: in no team)."""
    from scheduling.models import Membership, Team

    def make(role=None, team="default"):
        user = django_user_model.objects.create_user(f"s{uuid.uuid4().hex[:8]}", password="pw", is_staff=True)
        if role is not None:
            Membership.objects.create(team=Team.objects.get_or_create(name=team)[0], user=user, role=role)
        client.force_login(user)
        client.user = user
        return client

    return make


@pytest.fixture
def readonly_client(staff_client):
    return staff_client("viewer")

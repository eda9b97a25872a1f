"""Finding an endpoint by name: names are unique within a team only, so the one lookup the API's
filters, cancel-task and the bulk actions share says none, one, or which teams have it."""

import uuid

import pytest
from django.core.exceptions import ValidationError

from scheduling.endpoints.selectors import endpoint_get_one, endpoint_list_in_teams
from scheduling.models import Endpoint, Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_teams(versions):
    """Teams a and b, each with an endpoint called billing; a alone has invoices."""
    teams = [Team.objects.create(name=f"{side}-{uuid.uuid4().hex[:6]}") for side in "ab"]
    for team in teams:
        Endpoint.objects.create(name="billing", queue=f"{team.name}--billing", topology=versions["v2"], team=team)
    Endpoint.objects.create(name="invoices", queue=f"{teams[0].name}--invoices", topology=versions["v2"], team=teams[0])
    return teams


def test_one_team_names_its_endpoint(two_teams):
    a, b = two_teams
    assert endpoint_get_one(name="billing", team_ids=[b.pk]).team == b
    assert endpoint_get_one(name="invoices", team_ids=None).team == a


def test_a_name_no_team_of_the_caller_has_is_none(two_teams):
    a, b = two_teams
    assert endpoint_get_one(name="invoices", team_ids=[b.pk]) is None
    assert endpoint_get_one(name="nothing", team_ids=None) is None
    assert endpoint_get_one(name="bill\x00ing", team_ids=None) is None  # never reaches PostgreSQL


def test_a_name_several_teams_have_asks_which_team(two_teams):
    a, b = two_teams
    with pytest.raises(ValidationError) as raised:
        endpoint_get_one(name="billing", team_ids=[a.pk, b.pk])
    assert list(raised.value.message_dict) == ["team"]
    assert f"({a.name}, {b.name})" in raised.value.message_dict["team"][0]


def test_the_teams_endpoints_are_narrowed_to_them(two_teams):
    a, b = two_teams
    assert sorted(endpoint_list_in_teams(team_ids=[a.pk]).values_list("name", flat=True)) == ["billing", "invoices"]
    assert list(endpoint_list_in_teams(team_ids=[]).values_list("name", flat=True)) == []
    assert endpoint_list_in_teams(team_ids=None).filter(team__in=two_teams).count() == 3

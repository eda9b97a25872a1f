"""The report's selectors in a caller's scope: a team's members read their teams' rows only, never
another team's nor the platform-wide ones (team *); operators read every row."""

from datetime import timedelta

import pytest

from scheduling.core.caller import Caller
from scheduling.core.roles import Action
from scheduling.models import Membership, Team
from scheduling.reports import facts
from scheduling.teams.selectors import caller_for_user
from tests.scheduling.reports.conftest import ALL, DAY, OWN_ENDPOINT, two_teams_reports

pytestmark = pytest.mark.django_db
FIRST = DAY - timedelta(days=6)


@pytest.fixture
def rows():
    return two_teams_reports()


@pytest.fixture
def member_of(django_user_model):
    """member_of("a", ...) -> the scope (Caller.team_ids(READ)) of a viewer of those teams."""

    def make(*teams: str) -> frozenset[int] | None:
        user = django_user_model.objects.create_user(f"viewer-{'-'.join(teams) or 'none'}")
        for name in teams:
            Membership.objects.create(team=Team.objects.get(name=name), user=user, role="viewer")
        return caller_for_user(user=user).team_ids(Action.READ)

    return make


OPERATOR = Caller(name="root", operator=True).team_ids(Action.READ)  # None: every team


def pks(found) -> set[int]:
    return {row.pk for row in found}


def test_a_member_of_a_reads_only_as_rows_and_an_operator_every_row(rows, member_of):
    a = member_of("a")
    assert facts.accuracy_report_list_values(dimension="team", team_ids=a) == ["a"]
    assert facts.accuracy_report_list_values(dimension="endpoint", team_ids=a) == ["billing", "invoices"]
    for team in ("a", "b", ALL):  # asking for another team's rows, or the platform's, finds nothing
        trend = facts.accuracy_report_list_slice(first_day=FIRST, last_day=DAY, team_ids=a, team=team)
        assert pks(trend) == (pks(rows["a"][:2]) if team == "a" else set())
        by_endpoint = facts.accuracy_report_list_breakdown(day=DAY, by="endpoint", team=team, team_ids=a)
        assert pks(by_endpoint) == (pks(rows["a"][2:4]) if team in ("a", ALL) else set())
    (problem,) = facts.accuracy_report_list_problems(first_day=FIRST, last_day=DAY, team_ids=a)
    assert (problem.team, problem.endpoint, problem.lost) == ("a", "billing", 1)
    assert facts.accuracy_report_list_problems(first_day=FIRST, last_day=DAY, team_ids=a, team="b") == []

    assert facts.accuracy_report_list_values(dimension="team", team_ids=OPERATOR) == ["a", "b"]
    assert facts.accuracy_report_list_values(dimension="endpoint", team_ids=OPERATOR) == [
        "billing", "invoices", "payroll"]
    platform = facts.accuracy_report_list_slice(first_day=FIRST, last_day=DAY, team_ids=OPERATOR)
    assert pks(platform) == pks(rows[ALL][:2])
    assert len(facts.accuracy_report_list_problems(first_day=FIRST, last_day=DAY, team_ids=OPERATOR)) == 2


def test_endpoint_names_are_read_per_team(rows, member_of):
    """Both teams have a billing: with a team chosen, only its endpoints; across teams (an
    operator, team *), each team's endpoint rollup apart."""
    assert facts.accuracy_report_list_values(dimension="endpoint", team_ids=OPERATOR, team="b") == [
        "billing", OWN_ENDPOINT["b"]]
    assert facts.accuracy_report_list_values(dimension="team", team_ids=OPERATOR, endpoint="billing") == ["a", "b"]
    by_endpoint = facts.accuracy_report_list_breakdown(day=DAY, by="endpoint", team=ALL, team_ids=OPERATOR)
    assert [(r.team, r.endpoint) for r in by_endpoint] == [
        ("a", "billing"), ("a", "invoices"), ("b", "billing"), ("b", "payroll")]
    by_bucket = facts.accuracy_report_list_breakdown(day=DAY, by="delay_bucket", team=ALL, team_ids=OPERATOR)
    assert pks(by_bucket) == {rows[ALL][3].pk}  # the platform-wide row, not the teams'


def test_a_member_of_both_teams_reads_both_and_still_no_platform_rows(rows, member_of):
    both = member_of("a", "b")
    assert facts.accuracy_report_list_values(dimension="team", team_ids=both) == ["a", "b"]
    assert facts.accuracy_report_get_latest_day(team_ids=both) == DAY
    assert facts.accuracy_report_list_slice(first_day=FIRST, last_day=DAY, team_ids=both) == []  # team *
    assert len(facts.accuracy_report_list_problems(first_day=FIRST, last_day=DAY, team_ids=both)) == 2


def test_no_team_reads_nothing(rows, member_of):
    nobody = member_of()
    assert nobody == frozenset()
    assert facts.accuracy_report_get_latest_day(team_ids=nobody) is None
    assert facts.accuracy_report_list_values(dimension="endpoint", team_ids=nobody) == []
    assert facts.accuracy_report_list_problems(first_day=FIRST, last_day=DAY, team_ids=nobody) == []


def test_which_slices_have_rows():
    assert facts.accuracy_report_slice_exists(team="a", dimensions=())
    assert facts.accuracy_report_slice_exists(team="a", dimensions=("endpoint",))
    assert facts.accuracy_report_slice_exists(team="a", dimensions=facts.GROUP_DIMENSIONS)
    assert not facts.accuracy_report_slice_exists(team="a", dimensions=("endpoint", "delay_bucket"))
    assert facts.accuracy_report_slice_exists(team=ALL, dimensions=("version",))
    assert not facts.accuracy_report_slice_exists(team=ALL, dimensions=("endpoint",))  # names are per team

"""The accuracy report's admin page: the filterable table, the highlighted problems, the charts,
all of them in the user's scope (a team's member reads their teams' rows; operators every row)."""

import xml.etree.ElementTree as ET
from datetime import date, timedelta

import pytest

from scheduling.models import AccuracyReport, Membership, Team
from tests.scheduling.reports.conftest import OWN_ENDPOINT, report_create, two_teams_reports

pytestmark = pytest.mark.django_db
URL = "/admin/scheduling/accuracyreport/"
LAST = date(2026, 11, 20)
ALL = AccuracyReport.ALL
NS = "{http://www.w3.org/2000/svg}"


def report(day=LAST, endpoint=ALL, version=ALL, delay_bucket=ALL, team="default", **counts) -> AccuracyReport:
    return report_create(day, team, endpoint, version, delay_bucket, **counts)


@pytest.fixture
def reports():
    """One team's rows (the default team) and the platform-wide ones (team *), as the job writes."""
    for team in ("default", ALL):
        for back in range(3):
            report(LAST - timedelta(days=back), team=team, lateness_p99_ms=15.5 + back)
        report(delay_bucket="1-10s", team=team)
        report(delay_bucket="<1s", early=1, team=team)
    report(endpoint="billing", lost=2)
    report(endpoint="audit")
    report(endpoint="billing", version="v2", delay_bucket="1-10s", lost=2)
    report(endpoint="audit", version="v1", delay_bucket="<1s", early=1, duplicates=3)


@pytest.fixture
def staff(client, admin_user):
    client.force_login(admin_user)
    return client


def charts(html: str) -> dict[str, ET.Element]:
    found = {}
    start = 0
    while (start := html.find('<svg xmlns="http://www.w3.org/2000/svg" class="dp-chart"', start)) != -1:
        end = html.index("</svg>", start) + len("</svg>")
        svg = ET.fromstring(html[start:end])
        found[svg.find(f"{NS}title").text] = svg
        start = end
    return found


def test_table_charts_and_problems_on_one_page(staff, reports):
    html = staff.get(URL).content.decode()
    assert set(charts(html)) == {
        "Lateness per day (all)",
        "Lost, duplicates, early per day (all)",
        f"Lateness per endpoint, {LAST}",
        f"Lateness per delay bucket, {LAST}",
    }
    per_day = charts(html)["Lateness per day (all)"]
    assert len(per_day.findall(f"{NS}polyline")) == 3  # p50, p95, p99 over the three days
    bucket_labels = [t.text for t in charts(html)[f"Lateness per delay bucket, {LAST}"].findall(f"{NS}text")]
    assert bucket_labels.index("<1s") < bucket_labels.index("1-10s")  # delay order, not alphabetical
    problems = html[html.index('id="accuracy-problems"') : html.index('id="accuracy-charts"')]
    assert problems.count("<tr>") == 3 and problems.index("audit") < problems.index("billing")  # worst first
    assert '<span class="dp-problem">3</span>' in html and '<span class="dp-problem">2</span>' in html


def test_filtering_by_endpoint_narrows_table_and_trend(staff, reports):
    html = staff.get(URL, {"endpoint": "billing"}).content.decode()
    assert "Lateness per day (team default, endpoint billing)" in charts(html)  # the team that has it
    assert html.count('class="field-day_iso') == 2  # billing's rollup and its one group
    assert "audit" not in html.split('id="result_list"')[1].split("</table>")[0]


def test_problem_filter_shows_only_rows_with_problems(staff, reports):
    html = staff.get(URL, {"problems": "duplicates"}).content.decode()
    assert html.count('class="field-day_iso') == 1


def test_the_scheduled_in_the_past_count_has_a_column_and_a_filter(staff, reports):
    report(endpoint="backdating", scheduled_in_past=7)
    html = staff.get(URL, {"problems": "in_past"}).content.decode()
    assert html.count('class="field-day_iso') == 1 and '<td class="field-in_past">7</td>' in html
    assert '<th scope="col" class="sortable column-in_past">' in staff.get(URL).content.decode()


def test_a_combination_without_rows_says_which_slices_exist(staff, reports):
    html = staff.get(URL, {"endpoint": "billing", "delay_bucket": "1-10s"}).content.decode()
    assert "pick one or all four" in html


def test_no_reports_yet_is_an_empty_page_not_an_error(staff):
    response = staff.get(URL)
    assert response.status_code == 200 and 'class="dp-chart"' not in response.content.decode()


def test_reports_are_read_only(staff, reports):
    row = AccuracyReport.objects.first()
    assert staff.get(URL + "add/").status_code == 403
    assert staff.post(f"{URL}{row.pk}/change/", {}).status_code == 403
    assert staff.get(f"{URL}{row.pk}/delete/").status_code == 403


def test_the_page_needs_a_staff_login(client, reports):
    response = client.get(URL)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


# --- in the user's scope: two teams, each with an endpoint billing --------------------------------


@pytest.fixture
def member(client, django_user_model):
    """member("a", ...) -> the client, logged in as a staff user who is a viewer of those teams."""

    def make(*teams: str, role: str = "viewer"):
        user = django_user_model.objects.create_user(f"m-{'-'.join(teams) or 'none'}", password="pw", is_staff=True)
        for name in teams:
            Membership.objects.create(team=Team.objects.get_or_create(name=name)[0], user=user, role=role)
        client.force_login(user)
        return client

    return make


def result_table(html: str) -> str:
    return html.split('id="result_list"')[1].split("</table>")[0]


def axis_ms(svg: ET.Element) -> list[float]:
    """The y axis' tick values of a chart in milliseconds (labels such as "15 ms")."""
    texts = [t.text for t in svg.iter(f"{NS}text") if t.text and t.text.endswith(" ms")]
    return [float(text[:-3].replace(",", "")) for text in texts]


def test_a_member_of_a_sees_only_as_rows_endpoints_charts_and_problems(member, admin_user):
    rows = two_teams_reports(LAST)
    html = member("a").get(URL).content.decode()

    table = result_table(html)
    assert table.count('class="field-day_iso') == len(rows["a"])
    assert table.count('<td class="field-team">a</td>') == len(rows["a"])  # no b rows, no platform (all) rows
    assert OWN_ENDPOINT["b"] not in html  # b's endpoint: not in the table, the filters, the charts or problems
    assert "?endpoint=invoices" in html and "?endpoint=billing" in html
    assert "?team=a" in html and "?team=b" not in html and "platform-wide" not in html
    found = charts(html)
    assert set(found) == {"Lateness per day (team a)", "Lost, duplicates, early per day (team a)",
                          f"Lateness per endpoint of team a, {LAST}", f"Lateness per delay bucket of team a, {LAST}"}
    labels = [t.text for t in found[f"Lateness per endpoint of team a, {LAST}"].iter(f"{NS}text")]
    assert "billing" in labels and "invoices" in labels
    assert all(max(axis_ms(svg)) < 50 for svg in found.values() if axis_ms(svg))  # b's p99s are 90 ms and up
    problems = html[html.index('id="accuracy-problems"'): html.index('id="accuracy-charts"')]
    assert problems.count("<tr>") == 2 and "<td>a</td>" in problems and "<td>b</td>" not in problems


def test_a_member_asking_for_another_teams_or_the_platforms_rows_gets_none(member):
    rows = two_teams_reports(LAST)
    client = member("a")
    for team in ("b", ALL):
        html = client.get(URL, {"team": team}).content.decode()
        assert 'class="field-day_iso' not in html and OWN_ENDPOINT["b"] not in html
        # no figure of b's (p99 90 ms and up) or of the platform's (50 ms and up) in any chart
        assert all(max(axis_ms(svg)) < 50 for svg in charts(html).values() if axis_ms(svg))
    assert client.get(f"{URL}{rows['a'][0].pk}/change/").status_code == 200
    for other in (rows["b"][0], rows[ALL][0]):
        assert client.get(f"{URL}{other.pk}/change/").status_code == 302  # "does not exist", like a missing row


def test_a_member_of_two_teams_reads_both_and_the_charts_say_which_team_they_show(member):
    rows = two_teams_reports(LAST)
    html = member("a", "b").get(URL).content.decode()
    assert result_table(html).count('class="field-day_iso') == len(rows["a"]) + len(rows["b"])
    assert '<td class="field-team">all</td>' not in html and "platform-wide" not in html
    assert "The charts show team a: you read the reports of several teams (a, b)" in html
    assert "Lateness per day (team a)" in charts(html)


def test_a_members_page_is_read_only_and_needs_a_team(member, client):
    rows = two_teams_reports(LAST)
    viewer = member("a", role="admin")  # even a team's admin
    row = rows["a"][0]
    assert "Save" not in viewer.get(f"{URL}{row.pk}/change/").content.decode()
    assert viewer.get(URL + "add/").status_code == 403
    assert viewer.post(f"{URL}{row.pk}/change/", {}).status_code == 403
    assert viewer.get(f"{URL}{row.pk}/delete/").status_code == 403
    assert member().get(URL).status_code == 403  # staff of no team


def test_an_operator_sees_every_team_and_the_platform_rows(staff):
    rows = two_teams_reports(LAST)
    html = staff.get(URL).content.decode()
    assert result_table(html).count('class="field-day_iso') == sum(len(team_rows) for team_rows in rows.values())
    assert '<td class="field-team">all</td>' in html and "all (platform-wide rows)" in html
    assert "?team=a" in html and "?team=b" in html
    found = charts(html)
    assert "Lateness per day (all)" in found  # the platform-wide rows
    labels = {t.text for t in found[f"Lateness per endpoint, {LAST}"].iter(f"{NS}text")}
    assert {"a/billing", "a/invoices", "b/billing", "b/payroll"} <= labels  # each team's billing apart
    assert "Lateness per day (team b)" in charts(staff.get(URL, {"team": "b"}).content.decode())


def test_an_endpoint_of_several_teams_asks_the_operator_to_pick_one(staff):
    two_teams_reports(LAST)
    html = staff.get(URL, {"endpoint": "billing"}).content.decode()
    assert result_table(html).count('<td class="field-endpoint">billing</td>') == 4  # a's and b's
    assert "several teams have an endpoint billing (a, b)" in html
    assert "Lateness per day (team a, endpoint billing)" in charts(html)
    html = staff.get(URL, {"endpoint": "billing", "team": "b"}).content.decode()
    assert "Lateness per day (team b, endpoint billing)" in charts(html) and "several teams" not in html


@pytest.mark.parametrize("name", ["team", "endpoint", "version", "delivery_mode", "delay_bucket"])
def test_a_value_with_a_nul_byte_matches_nothing_instead_of_failing(staff, member, name):
    two_teams_reports(LAST)
    for login in (lambda: staff, lambda: member("a")):  # one client: log in as each in turn
        response = login().get(URL, {name: "billing\x00"})
        assert response.status_code == 200 and 'class="field-day_iso' not in response.content.decode()

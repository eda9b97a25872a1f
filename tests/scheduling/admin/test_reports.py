"""The accuracy report's admin page: the filterable table, the highlighted problems, the charts."""

import xml.etree.ElementTree as ET
from datetime import date, datetime, timedelta, timezone

import pytest

from scheduling.models import AccuracyReport
from tests.scheduling.reports.conftest import report_values

pytestmark = pytest.mark.django_db
URL = "/admin/scheduling/accuracyreport/"
LAST = date(2026, 11, 20)
ALL = AccuracyReport.ALL
NS = "{http://www.w3.org/2000/svg}"


def report(day=LAST, endpoint=ALL, version=ALL, delay_bucket=ALL, **counts) -> AccuracyReport:
    mode = ALL if ALL in (endpoint, version, delay_bucket) else "native"
    values = report_values(day=day, endpoint=endpoint, version=version, delivery_mode=mode,
                           delay_bucket=delay_bucket, **counts)  # fmt: skip
    return AccuracyReport.objects.create(**values, computed_at=datetime.now(timezone.utc))


@pytest.fixture
def reports():
    for back in range(3):
        report(LAST - timedelta(days=back), lateness_p99_ms=15.5 + back)
    report(endpoint="billing", lost=2)
    report(endpoint="audit")
    report(delay_bucket="1-10s")
    report(delay_bucket="<1s", early=1)
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
    assert "Lateness per day (endpoint billing)" in charts(html)
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

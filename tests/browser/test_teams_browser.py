"""The control room as a member of team b, in real headless Chromium: every list, filter, form
choice, dashboard figure and action is b's; a's objects, though both teams have a `billing`, are
neither listed nor reachable nor changeable."""

import pytest

from scheduling.endpoints.services import endpoint_create
from scheduling.messages.services import message_schedule
from scheduling.models import ScheduledMessage
from scheduling.schedules.services import schedule_upsert
from scheduling.teams.services import team_create

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def two_teams(platform, endpoint_queues, staff_member):
    """Teams a and b each with `billing`, 3 (a) and 2 (b) messages, a schedule `nightly` and a
    failed message; a staff user who is a member of b."""
    made = {}
    for name, count in (("a", 3), ("b", 2)):
        team = team_create(name=name)
        endpoint = endpoint_create(team=team, name="billing")
        messages = [message_schedule(endpoint=endpoint, payload={"team": name, "n": n}, delay=3600)
                    for n in range(count)]
        failed = message_schedule(endpoint=endpoint, payload={"team": name, "failed": True}, delay=3600)
        ScheduledMessage.objects.filter(pk=failed.pk).update(status="failed", last_error=f"{name}'s error")
        schedule_upsert(team=team, key="nightly", endpoint=endpoint, payload={"team": name}, cron="30 2 * * *")
        made[name] = {"team": team, "endpoint": endpoint, "messages": messages, "failed": failed}
    staff_member(made["b"]["team"])
    return made


def test_a_member_of_b_sees_and_acts_on_b_only(browser, two_teams):
    a, b = two_teams["a"], two_teams["b"]
    browser.login("bea", "pw")

    browser.open("/admin/scheduling/scheduledmessage/")
    page = browser.driver.page_source  # the rows link to their full ids (short ids share a time prefix)
    assert all(str(m.pk) in page for m in b["messages"])
    assert not any(str(m.pk) in page for m in a["messages"])
    endpoint_filter = [a_.get_attribute("href") for a_ in browser.find_all("#changelist-filter a")
                       if "endpoint__id__exact=" in (a_.get_attribute("href") or "")]
    assert [link.rsplit("endpoint__id__exact=", 1)[1].split("&")[0] for link in endpoint_filter] == [str(b["endpoint"].pk)]
    browser.screenshot("40-team-b-messages")

    browser.open(f"/admin/scheduling/scheduledmessage/{a['messages'][0].pk}/change/")  # as if it did not exist
    assert "doesn’t exist" in browser.text() and '"team": "a"' not in browser.text()
    browser.open(f"/admin/scheduling/endpoint/{a['endpoint'].pk}/change/")
    assert "doesn’t exist" in browser.text() and "a--billing" not in browser.text()

    browser.open("/admin/scheduling/endpoint/")
    assert "b--billing" in browser.text() and "a--billing" not in browser.text()
    browser.open("/admin/scheduling/failedmessage/")
    assert "b's error" in browser.text() and "a's error" not in browser.text()
    browser.open("/admin/scheduling/schedule/")
    assert len(browser.find_all("#result_list tbody tr")) == 1

    browser.open("/admin/scheduling/scheduledmessage/add/")
    choices = [o.text for o in browser.find_all('select[name="endpoint"] option') if o.get_attribute("value")]
    assert choices == ["b/billing (v3)"]

    browser.open("/admin/scheduling/scheduledmessage/dashboard/")
    pending = browser.find('#dp-by-status [data-status="published"] .dp-value').text
    of_b = ScheduledMessage.objects.filter(endpoint__team=b["team"], status="published").count()  # with a schedule run
    assert int(pending) == of_b < ScheduledMessage.objects.filter(status="published").count()  # b's, never a's too
    browser.screenshot("41-team-b-dashboard")

    browser.open("/admin/scheduling/scheduledmessage/")
    browser.driver.execute_script(
        "const form = document.getElementById('changelist-form');"
        "const box = document.createElement('input'); box.type = 'checkbox'; box.name = '_selected_action';"
        f"box.value = '{a['messages'][0].pk}'; box.checked = true; form.appendChild(box);")
    browser.fill(action="cancel")
    browser.submit('button[name="index"]')
    assert ScheduledMessage.objects.get(pk=a["messages"][0].pk).status == "published"  # a's: untouched

"""The control room as an operator uses it: real headless Chromium, the live server, a real
Celery worker and the run's RabbitMQ vhost. Each page visited is saved under
artifacts/screenshots/ (git-ignored)."""

import pytest

from harness.waiting import wait_until
from scheduling.config.conf import broker
from scheduling.endpoints.services import endpoint_create
from scheduling.messages.services import message_schedule
from scheduling.models import Endpoint, Schedule, ScheduledMessage
from topology import cascade

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
V2_DELIVERY = cascade.delivery_exchange(cascade.V2.prefix)


def status_shown(browser) -> str:
    return browser.find(".field-status_badge .readonly").text


def endpoint_keys_on_broker() -> set[str]:
    return {b["routing_key"] for b in broker().management.bindings_from(broker().vhost, V2_DELIVERY)}


def test_operator_creates_an_endpoint_schedules_a_message_and_watches_it_delivered(
    browser, admin_user, platform, worker, endpoint_name
):
    browser.open("/admin/login/").screenshot("01-login")
    browser.login("admin", "pw")
    assert "Control room" in browser.text()
    browser.screenshot("02-index")

    browser.open("/admin/scheduling/endpoint/add/")
    browser.fill(name=endpoint_name, topology="v2", handler="none")
    browser.screenshot("03-endpoint-add")
    browser.submit('input[name="_save"]')
    assert f"Created and bound: {endpoint_name}" in browser.messages()
    assert f"#.default--{endpoint_name}" in endpoint_keys_on_broker()  # the default team's queue
    browser.open("/admin/scheduling/endpoint/").screenshot("04-endpoints")
    # flow control on its form: a concurrency limit on an endpoint with no calls is refused, a rate is kept
    endpoint = Endpoint.objects.get(name=endpoint_name)
    browser.open(f"/admin/scheduling/endpoint/{endpoint.pk}/change/")
    browser.fill(max_deliveries_per_second="20", max_concurrent="2")
    browser.submit('input[name="_save"]')
    assert "applies to webhook endpoints only" in browser.text()
    browser.fill(max_concurrent="")
    browser.submit('input[name="_save"]')
    assert f"Saved: {endpoint_name}" in browser.messages(), browser.messages()
    endpoint.refresh_from_db()
    assert (endpoint.max_deliveries_per_second, endpoint.max_concurrent) == (20, None)
    browser.open(f"/admin/scheduling/endpoint/?q={endpoint_name}")
    assert browser.find("td.field-flow_summary").text == "20/s"
    browser.screenshot("04b-endpoint-flow-control")

    browser.open("/admin/scheduling/scheduledmessage/add/")
    browser.fill(endpoint=endpoint.pk, payload='{"order": 42}', delay_seconds="8")
    browser.screenshot("05-schedule-form")
    browser.submit('input[name="_save"]')
    assert any(m.startswith("Scheduled: ") for m in browser.messages()), browser.messages()
    browser.reload_until(lambda: status_shown(browser) == "published", 7, "the page to show published")
    message = ScheduledMessage.objects.select_related("endpoint").get(endpoint__name=endpoint_name)
    page = browser.text()
    assert message.routing_key in page and message.first_exchange in page
    assert '"order": 42' in page and "x-dp-due-at-ms" in page and "Delivery Exchange" in page
    browser.screenshot("06-message-published")

    browser.reload_until(lambda: status_shown(browser) == "delivered", 30, "the page to show delivered")
    message.refresh_from_db()
    assert message.delivered_at >= message.due_at
    assert f"{message.lateness_ms:,} ms" in browser.find(".field-lateness .readonly").text
    browser.screenshot("07-message-delivered")
    browser.open("/admin/scheduling/scheduledmessage/").screenshot("08-messages")

    browser.open("/admin/scheduling/scheduledmessage/dashboard/")
    delivered = browser.find('#dp-by-status [data-status="delivered"] .dp-value').text
    assert int(delivered) == ScheduledMessage.objects.filter(status="delivered").count() >= 1
    assert browser.find('#dp-last-hour [data-figure="p50"] .dp-value').text.endswith(" ms")
    assert len(browser.find_all("#dp-charts svg.dp-chart")) == 2
    # every label as Chromium lays it out lies inside its chart (none clipped at the left edge)
    outside = browser.driver.execute_script("""
        const out = [];
        for (const svg of document.querySelectorAll('#dp-charts svg.dp-chart')) {
          const box = svg.getBoundingClientRect();
          for (const t of svg.querySelectorAll('text')) {
            const r = t.getBoundingClientRect();
            if (r.left < box.left - 0.5 || r.right > box.right + 0.5) out.push(t.textContent);
          }
        }
        return out;""")
    assert outside == []
    assert "e+" not in browser.find("#dp-charts").get_attribute("innerHTML")
    browser.screenshot("09-dashboard")


def test_operator_cancels_a_message_and_sees_it_in_flight_on_its_level(
    browser, admin_user, platform, worker, endpoint_name
):
    endpoint_create(name=endpoint_name)  # on v3, the default
    message = message_schedule(endpoint=endpoint_name, payload={"cancel": "me"}, delay=1_000_000)
    wait_until(lambda: ScheduledMessage.objects.get(pk=message.pk).status == "published", 10, message="published")
    assert message.topology.name == "v3"
    level = cascade.start_level(999_999)  # the whole seconds the relay routes: 19, TTL 524,288 s

    browser.login("admin", "pw")
    browser.open(f"/admin/scheduling/scheduledmessage/{message.pk}/change/")
    browser.screenshot("10-message-before-cancel")
    browser.submit('button.dp-action-button[value="cancel"]')
    assert "Cancelled: 1" in browser.messages()
    assert status_shown(browser) == "cancelled"
    assert not browser.find_all('button.dp-action-button[value="cancel"]')
    browser.screenshot("11-message-cancelled")

    browser.open("/admin/scheduling/topologyversion/").screenshot("12-topology-versions")
    browser.click_link("v3")
    cell = f'#dp-levels tr[data-level="{level}"] .dp-messages'
    browser.reload_until(lambda: browser.find(cell).text not in ("0", "—"), 30, "the level's depth to show")
    depth = broker().management.queue_depths(broker().vhost)[cascade.level_name(cascade.V3.prefix, level)]
    assert int(browser.find(cell).text) >= 1 and depth["messages"] >= 1
    assert "524288 seconds" in browser.find(f'#dp-levels tr[data-level="{level}"]').text
    assert "CC keys" in browser.find("#dp-routing").text
    queue = f"default--{endpoint_name}"
    row = next(r for r in browser.find_all("#dp-bindings tbody tr") if r.text.startswith(queue))
    assert row.text.split() == [queue, queue, "yes", "yes"]  # bound by its queue's own name on v3
    browser.screenshot("13-topology-v3-in-flight")

    browser.submit('button.dp-action-button[value="verify"]')
    assert "v3: the broker matches the plan" in [m.lower() for m in browser.messages()]
    browser.screenshot("14-topology-v3-verified")


def test_a_viewer_sees_their_team_s_rows_and_no_action_buttons(
    browser, platform, django_user_model, endpoint_name
):
    from scheduling.models import Membership, Team, default_team_id

    endpoint_create(name=endpoint_name)
    message = message_schedule(endpoint=endpoint_name, payload={"look": "only"}, delay=3600)
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    Membership.objects.create(team=Team.objects.get(pk=default_team_id()), user=viewer, role="viewer")

    browser.login("viewer", "pw")
    browser.open("/admin/scheduling/scheduledmessage/")
    assert str(message.pk)[:8] in browser.text()
    assert not browser.find_all('select[name="action"]') and not browser.find_all("a.addlink")
    browser.screenshot("15-read-only-messages")
    browser.open(f"/admin/scheduling/scheduledmessage/{message.pk}/change/")
    assert '"look": "only"' in browser.text() and not browser.find_all("button.dp-action-button")
    browser.screenshot("16-read-only-message")
    browser.open(f"/admin/scheduling/topologyversion/{platform['v2'].pk}/change/")
    assert "403 Forbidden" in browser.text()  # the cascades are the operators'
    browser.open("/admin/scheduling/endpoint/")
    assert not browser.find_all('select[name="action"]')


def test_operator_pages_through_a_long_list_by_older_and_newer(browser, admin_user, versions, endpoint_name):
    """120 messages of one bulk request (one created_at): Older and Newer walk the list by its
    cursor, each message once, and the count says it is PostgreSQL's estimate."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.models import Endpoint

    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"])
    now = timezone.now()
    ScheduledMessage.objects.bulk_create(
        ScheduledMessage(endpoint=endpoint, topology=versions["v3"], payload={"n": i}, created_at=now,
                         due_at=now + timedelta(minutes=i), requested_delay_ms=60_000 * i) for i in range(120))
    expected = [str(i)[:8] for i in ScheduledMessage.objects.order_by("-created_at", "-id").values_list("id", flat=True)]

    def shown() -> list[str]:
        return [a.text for a in browser.find_all("#result_list tbody th a")]

    browser.login("admin", "pw")
    browser.open("/admin/scheduling/scheduledmessage/")
    assert shown() == expected[:50] and "scheduled messages" in browser.find("#dp-pages").text
    assert browser.find("#dp-pages .dp-count").get_attribute("title").startswith("PostgreSQL's estimate")
    browser.screenshot("13-messages-first-page")
    browser.click_link("Older ›")
    assert shown() == expected[50:100]
    browser.click_link("Older ›")
    assert shown() == expected[100:] and not browser.find_all("#dp-pages .dp-older")
    browser.click_link("‹ Newer")
    assert shown() == expected[50:100]
    browser.click_link("« Newest")
    assert shown() == expected[:50]
    browser.click_link(str(now.year))  # the calendar: every month of the year, then every day of a month
    months = [a.text for a in browser.find_all("nav.toplinks a:not(.date-back)")]
    assert len(months) == 12 and months[0].startswith("January")
    browser.click_link(now.strftime("%B %Y"))
    assert len(browser.find_all("nav.toplinks a:not(.date-back)")) >= 28 and set(shown()) <= set(expected)
    browser.screenshot("14-messages-calendar")


def test_operator_creates_a_schedule_sees_its_next_runs_and_pauses_it(browser, admin_user, platform, endpoint_name):
    endpoint = endpoint_create(name=endpoint_name)
    browser.login("admin", "pw")
    browser.open("/admin/scheduling/schedule/add/")
    browser.fill(key=f"{endpoint_name}.nightly", endpoint=endpoint.pk, payload='{"report": 1}',
                 cron="30 2 * * *", timezone="Europe/Berlin")
    browser.screenshot("30-schedule-add")
    browser.submit('input[name="_save"]')
    assert f"Saved: {endpoint_name}.nightly" in browser.messages(), browser.messages()
    assert "Next runs (UTC):" in browser.text()
    browser.screenshot("31-schedule-change")

    browser.open("/admin/scheduling/schedule/")
    row = browser.find("#result_list tbody tr").text
    assert f"{endpoint_name}.nightly" in row and "30 2 * * * Europe/Berlin" in row
    browser.screenshot("32-schedules")
    message_schedule(endpoint=endpoint_name, payload={"not": "a run"}, delay=60)
    browser.click_link("runs")
    run = ScheduledMessage.objects.get(schedule=f"{endpoint_name}.nightly")  # the next run only: it is a day ahead
    listed = [r.text for r in browser.find_all("#result_list tbody tr")]
    assert len(listed) == 1 and str(run.pk)[:8] in listed[0]
    browser.screenshot("33-schedule-runs")

    browser.open(f"/admin/scheduling/schedule/{Schedule.objects.get().pk}/change/")
    browser.submit('button.dp-action-button[value="pause"]')
    assert "Paused: 1" in browser.messages()
    assert ScheduledMessage.objects.get(pk=run.pk).status == "cancelled"
    browser.screenshot("34-schedule-paused")


def test_operator_reschedules_a_message_and_republishes_the_dead_letters(browser, admin_user, platform, worker,
                                                                          endpoint_name):
    endpoint_create(name=endpoint_name)
    message = message_schedule(endpoint=endpoint_name, payload={"move": "me"}, delay=3600)
    failed = [message_schedule(endpoint=endpoint_name, payload={"n": n}, delay=3600) for n in range(3)]
    ScheduledMessage.objects.filter(pk__in=[m.pk for m in failed]).update(
        status="failed", last_error="handler attempt 6: HTTPError: 503 Service Unavailable")
    browser.login("admin", "pw")

    browser.open(f"/admin/scheduling/scheduledmessage/{message.pk}/change/")
    browser.click(browser.find("a.dp-action-link"))  # "RESCHEDULE": the admin writes its tools in capitals
    browser.fill(delay_seconds="2")
    browser.screenshot("40-reschedule-form")
    browser.submit('input[name="_save"]')
    assert any(m.startswith("Rescheduled: ") for m in browser.messages()), browser.messages()
    browser.reload_until(lambda: status_shown(browser) == "delivered", 30, "the moved message delivered")
    row = ScheduledMessage.objects.get(pk=message.pk)
    assert row.due_history and row.delivered_at >= row.due_at and row.delivery_count == 1
    assert "moved_at" in browser.find(".field-due_history .readonly").text
    browser.screenshot("41-rescheduled-delivered")

    browser.open("/admin/scheduling/failedmessage/")
    assert "503 Service Unavailable" in browser.find("#result_list").text
    assert len(browser.find_all("#result_list tbody tr")) == 3
    browser.screenshot("42-dead-letters")
    browser.find("#action-toggle").click()  # ticks every row (no page load)
    browser.fill(action="republish_all_matching")
    browser.submit('button[name="index"]')
    assert any("Republishing 3 failed message(s)" in m for m in browser.messages()), browser.messages()
    browser.reload_until(lambda: "3 / 3" in browser.find("#result_list").text, 30, "the bulk action's progress")
    assert "done" in browser.find("#result_list tbody tr").text
    browser.screenshot("43-bulk-action-done")
    assert not ScheduledMessage.objects.filter(pk__in=[m.pk for m in failed], status="failed").exists()

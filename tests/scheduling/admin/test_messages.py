"""The messages list, detail page, schedule form and actions, through the admin's HTTP views."""

import calendar
import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from scheduling.core.clock import to_epoch_ms
from scheduling.messages.relay import relay_publish
from scheduling.models import AuditEvent, Endpoint, MessageAttempt, ScheduledMessage
from tests.scheduling.messages.test_selectors import assert_no_exact_count

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status
LIST = reverse("admin:scheduling_scheduledmessage_changelist")
ADD = reverse("admin:scheduling_scheduledmessage_add")


def detail(message) -> str:
    return reverse("admin:scheduling_scheduledmessage_change", args=[message.pk])


def listed_ids(response) -> set[str]:
    return set(re.findall(r'/scheduledmessage/([0-9a-f-]{36})/change/', response.content.decode()))


def older_link(page: str) -> str | None:
    found = re.search(r'<a class="dp-older" href="([^"]+)"', page)
    return found and found.group(1).replace("&amp;", "&")


def newer_link(page: str) -> str | None:
    found = re.search(r'<a class="dp-newer" href="([^"]+)"', page)
    return found and found.group(1).replace("&amp;", "&")


def test_list_shows_the_columns_and_pages_without_a_query_per_row(admin_client, make_rows,
                                                                  django_assert_max_num_queries):
    make_rows(3)
    page = admin_client.get(LIST).content.decode()
    assert "3 scheduled messages" in page and "≈" not in page and not older_link(page)  # one page: counted
    make_rows(60, status=Status.DELIVERED, delivered_at=timezone.now(), lateness_ms=1234, delivery_count=1)
    with django_assert_max_num_queries(13) as few:  # 13: the waiting messages' range (ordering keys)
        admin_client.get(LIST)
    make_rows(100)
    with django_assert_max_num_queries(len(few.captured_queries)) as many:
        response = admin_client.get(LIST)
    assert_no_exact_count(many.captured_queries)
    page = response.content.decode()
    assert len(listed_ids(response)) == 50 and re.search(r"≈ [\d,]+ scheduled messages</span>,\s+newest first", page)
    assert "?p=2" not in page and older_link(page)
    page = admin_client.get(LIST, {"status__exact": "delivered"}).content.decode()
    assert "1,234 ms" in page and "delivered" in page


def test_pages_follow_a_cursor_every_message_once_ties_included(admin_client, make_rows):
    """Newest first by created_at, then id: 120 messages of one bulk request share their created_at."""
    bulk = timezone.now() - timedelta(minutes=1)
    make_rows(120, created_at=bulk)
    make_rows(15, created_at=bulk + timedelta(seconds=1))
    make_rows(10, created_at=bulk - timedelta(seconds=1))
    expected = [str(i) for i in ScheduledMessage.objects.order_by("-created_at", "-id").values_list("id", flat=True)]
    seen, url, pages = [], LIST, []
    while url:
        page = admin_client.get(url).content.decode()
        pages.append(page)
        seen += re.findall(r'/scheduledmessage/([0-9a-f-]{36})/change/', page)
        url = older_link(page) and LIST + older_link(page)
    assert seen == expected and len(pages) == 3
    back = admin_client.get(LIST + newer_link(pages[2])).content.decode()  # Newer from the last page
    assert re.findall(r'/scheduledmessage/([0-9a-f-]{36})/change/', back) == expected[50:100]
    assert '<a class="dp-newest" href="?">' in back


def test_columns_do_not_sort_the_table(admin_client, make_rows):
    """Sorting by a column meant sorting every row: the list keeps the index's order."""
    first, second = make_rows(2)
    page = admin_client.get(LIST, {"o": "-5"}).content.decode()
    assert 'class="sortable' not in page
    assert [m for m in re.findall(r'/scheduledmessage/([0-9a-f-]{36})/change/', page)] == \
        [str(i) for i in ScheduledMessage.objects.order_by("-created_at", "-id").values_list("id", flat=True)]


def test_due_filters_list_by_due_time(admin_client, make_rows):
    now = timezone.now()
    soon, later, latest = (make_rows(1, due_at=now + timedelta(minutes=m))[0] for m in (30, 10, 50))
    past = [make_rows(1, due_at=now - timedelta(hours=h))[0] for h in (3, 1, 2)]

    def ids(query):
        return re.findall(r'/scheduledmessage/([0-9a-f-]{36})/change/', admin_client.get(f"{LIST}?{query}").content.decode())

    assert ids("due=next-hour") == [str(m.pk) for m in (later, soon, latest)]  # soonest first
    assert ids("due=past-day") == [str(past[i].pk) for i in (1, 2, 0)]  # latest first
    assert "soonest due first" in admin_client.get(f"{LIST}?due=next-hour").content.decode()


def test_the_calendar_lists_dates_without_reading_the_table(admin_client, make_rows, django_assert_max_num_queries):
    """Django listed the years, months and days that have messages with a DISTINCT over the
    table; the calendar lists every one from the first due time to the last (two index reads)."""
    now = timezone.now()
    make_rows(1, due_at=now.replace(year=now.year - 1))
    make_rows(1, due_at=now.replace(year=now.year + 1))
    with CaptureQueriesContext(connection) as captured:
        page = admin_client.get(LIST).content.decode()
    assert not any("DISTINCT" in q["sql"] for q in captured.captured_queries)
    assert all(f"due_at__year={y}" in page for y in (now.year - 1, now.year, now.year + 1))
    months = admin_client.get(LIST, {"due_at__year": now.year}).content.decode()
    assert all(f"due_at__month={m}&amp;due_at__year={now.year}" in months or
               f"due_at__year={now.year}&amp;due_at__month={m}" in months for m in range(1, 13))
    days = admin_client.get(LIST, {"due_at__year": now.year, "due_at__month": 2}).content.decode()
    assert days.count("due_at__day=") == (29 if calendar.isleap(now.year) else 28)


def test_filters_by_status_endpoint_version_and_due_window(admin_client, make_rows, versions, endpoint_name):
    from scheduling.models import Endpoint

    now = timezone.now()
    soon = make_rows(1, due_at=now + timedelta(seconds=30))[0]
    later = make_rows(1, due_at=now + timedelta(days=3), status=Status.PUBLISHED)[0]
    other = Endpoint.objects.create(name=endpoint_name + "-v1", queue=endpoint_name + "-v1", topology=versions["v1"])
    on_v1 = make_rows(1, endpoint=other, due_at=now - timedelta(hours=2), status=Status.FAILED)[0]
    expectations = {
        "status__exact=published": {later},
        "due=next-minute": {soon},
        "due=later": {later},
        "due=past-day": {on_v1},
        f"endpoint__id__exact={other.pk}": {on_v1},
        f"topology__id__exact={versions['v1'].pk}": {on_v1},
    }
    day = soon.due_at  # the date hierarchy: every row due on that calendar day (UTC)
    expectations[f"due_at__year={day.year}&due_at__month={day.month}&due_at__day={day.day}"] = {
        m for m in (soon, later, on_v1) if m.due_at.date() == day.date()
    }
    for query, expected in expectations.items():
        assert listed_ids(admin_client.get(f"{LIST}?{query}")) == {str(m.pk) for m in expected}, query


def test_a_message_scheduled_in_the_past_is_marked_and_filtered(admin_client, make_rows):
    now = timezone.now()
    (backdated,) = make_rows(1, due_at=now - timedelta(days=1), created_at=now)
    (on_time,) = make_rows(1, due_at=now, created_at=now)  # a delay of 0
    (later,) = make_rows(1, due_at=now + timedelta(hours=1), created_at=now)
    assert listed_ids(admin_client.get(f"{LIST}?in_past=yes")) == {str(backdated.pk)}
    assert listed_ids(admin_client.get(f"{LIST}?in_past=no")) == {str(on_time.pk), str(later.pk)}
    assert admin_client.get(LIST).content.decode().count("scheduled in the past</span>") == 1
    page = admin_client.get(detail(backdated)).content.decode()
    assert "scheduled in the past</span>" in page and (now - timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S") in page
    assert "scheduled in the past</span>" not in admin_client.get(detail(on_time)).content.decode()


def test_search_by_id_or_idempotency_key(admin_client, make_rows):
    first, second = make_rows(2)
    ScheduledMessage.objects.filter(pk=second.pk).update(idempotency_key="invoice-42")
    assert listed_ids(admin_client.get(LIST, {"q": str(first.pk)})) == {str(first.pk)}
    assert listed_ids(admin_client.get(LIST, {"q": " invoice-42 "})) == {str(second.pk)}
    assert listed_ids(admin_client.get(LIST, {"q": "no-such-key"})) == set()


@pytest.mark.broker
def test_detail_shows_payload_headers_and_path_as_published(admin_client, platform, make_rows, amqp):
    from scheduling.endpoints.services import endpoint_bind

    (message,) = make_rows(1, payload={"invoice": 42, "lines": ["a", "b"]}, due_at=timezone.now() + timedelta(seconds=10))
    endpoint_bind(endpoint=message.endpoint)
    assert relay_publish(ids=[str(message.pk)]).published == 1
    message.refresh_from_db()
    page = admin_client.get(detail(message)).content.decode()
    assert json.dumps({"invoice": 42, "lines": ["a", "b"]}, indent=2) in page.replace("&quot;", '"')
    assert message.routing_key in page and message.first_exchange in page
    assert f"<td>x-dp-published-at-ms</td><td>{to_epoch_ms(message.published_at)}</td>" in page
    assert f"<td>x-dp-due-at-ms</td><td>{message.due_at_ms}</td>" in page
    assert "<th>Routing Key Segment</th>" in page and "<td>Delivery Exchange</td>" in page
    assert f"<code>{message.endpoint.name}</code>" in page and 'value="cancel"' in page


def test_detail_of_an_unpublished_message_previews_its_route(admin_client, make_rows):
    (message,) = make_rows(1, status=Status.CANCELLED, due_at=timezone.now() + timedelta(seconds=100))
    page = admin_client.get(detail(message)).content.decode()
    assert "not published (cancelled); if published now" in page
    assert 'value="cancel"' not in page and 'value="republish"' not in page
    assert '<div class="readonly">None</div>' not in page  # empty values show as the admin's "-"


def test_detail_of_a_message_no_message_can_be_built_of_says_why(admin_client, make_rows, endpoint_row):
    """A celery_queue endpoint's row whose payload is no task (the relay failed it as unbuildable):
    its page says why instead of failing."""
    Endpoint.objects.filter(pk=endpoint_row.pk).update(handler=Endpoint.Handler.CELERY_QUEUE)
    (message,) = make_rows(1, status=Status.FAILED, last_error="its payload is not a Celery task")
    response = admin_client.get(detail(message))
    assert response.status_code == 200
    assert "no message can be built of it: its payload is not a Celery task for queue" in response.content.decode()


def test_schedule_form_schedules_through_the_service(admin_client, platform, endpoint_row):
    response = admin_client.post(ADD, {"endpoint": endpoint_row.pk, "payload": '{"a": 1}', "delay_seconds": "2.5",
                                       "idempotency_key": "k-1"})
    message = ScheduledMessage.objects.get()
    assert response.status_code == 302 and response.url == detail(message)
    assert message.payload == {"a": 1} and message.requested_delay_ms == 2500 and message.idempotency_key == "k-1"
    deliver_at = (timezone.now() + timedelta(minutes=5)).replace(microsecond=0)
    admin_client.post(ADD, {"endpoint": endpoint_row.pk, "payload": "[1]", "deliver_at": deliver_at.isoformat()})
    assert ScheduledMessage.objects.filter(payload=[1], due_at=deliver_at).exists()


def test_schedule_form_sets_the_flow_key_and_the_page_shows_it(admin_client, platform, endpoint_row):
    response = admin_client.post(ADD, {"endpoint": endpoint_row.pk, "payload": "{}", "delay_seconds": "60",
                                       "flow_key": "customer-42"})
    message = ScheduledMessage.objects.get()
    assert response.status_code == 302 and message.flow_key == "customer-42"
    page = admin_client.get(detail(message)).content.decode()
    assert "Flow key" in page and "customer-42" in page


@pytest.mark.parametrize("data,field,text", [
    ({"payload": "{}", }, "delay_seconds", "give exactly one of a delay or a deliver-at time"),
    ({"payload": "{}", "delay_seconds": "-1"}, "delay_seconds", "must not be negative"),
    ({"payload": "{}", "delay_seconds": "300000000"}, "delay_seconds", "maximum delay of 268,435,455 s"),
    ({"payload": "null", "delay_seconds": "1"}, "payload", "required"),
    ({"payload": "{oops", "delay_seconds": "1"}, "payload", "Enter a valid JSON"),
    ({"payload": "{}", "delay_seconds": "1", "idempotency_key": "schedule:k:1:1"}, "idempotency_key", "platform's"),
])
def test_schedule_form_shows_the_services_errors_on_the_field(admin_client, endpoint_row, data, field, text):
    response = admin_client.post(ADD, {"endpoint": endpoint_row.pk, **data})
    assert response.status_code == 200 and not ScheduledMessage.objects.exists()
    errors = response.context["adminform"].form.errors
    assert any(text in error for error in errors.get(field, [])), errors


def test_schedule_form_refuses_an_inactive_endpoint(admin_client, endpoint_row):
    endpoint_row.is_active = False
    endpoint_row.save()
    response = admin_client.post(ADD, {"endpoint": endpoint_row.pk, "payload": "1", "delay_seconds": "1"})
    assert "is inactive" in response.context["adminform"].form.errors["endpoint"][0]


def test_cancel_action_cancels_pending_and_published_and_reports_the_rest(admin_client, make_rows):
    pending = make_rows(1)[0]
    published = make_rows(1, status=Status.PUBLISHED)[0]
    delivered = make_rows(1, status=Status.DELIVERED)[0]
    response = admin_client.post(LIST, {"action": "cancel", "_selected_action": [pending.pk, published.pk,
                                                                                  delivered.pk]}, follow=True)
    statuses = dict(ScheduledMessage.objects.values_list("pk", "status"))
    assert statuses == {pending.pk: "cancelled", published.pk: "cancelled", delivered.pk: "delivered"}
    shown = [str(m) for m in response.context["messages"]]
    assert "Cancelled: 2" in shown and any("already delivered and cannot be cancelled" in m for m in shown)


def test_republish_button_puts_a_failed_message_back_to_pending(admin_client, make_rows):
    (failed,) = make_rows(1, status=Status.FAILED, attempts=5, last_error="boom")
    response = admin_client.post(reverse("admin:scheduling_scheduledmessage_action", args=[failed.pk, "republish"]))
    assert response.status_code == 302 and response.url == detail(failed)
    failed.refresh_from_db()
    assert failed.status == Status.PENDING and failed.attempts == 0


def test_detail_lists_the_attempts_oldest_first_escaped_and_shortened(admin_client, make_rows):
    (message,) = make_rows(1, status=Status.DELIVERED, attempts=1)
    now = timezone.now()
    MessageAttempt.objects.create(message=message, number=2, trigger="retry", started_at=now - timedelta(seconds=5),
                                  duration_ms=1_250, outcome="ok", status_code=200, excerpt="x" * 1000,
                                  worker="second@host")
    MessageAttempt.objects.create(message=message, number=1, started_at=now - timedelta(seconds=65), duration_ms=5_000,
                                  outcome="http_status", status_code=500,
                                  excerpt="<script>alert('receiver')</script>", worker="first@host")
    (other,) = make_rows(1, status=Status.DELIVERED)
    MessageAttempt.objects.create(message=other, number=1, started_at=now, duration_ms=1, outcome="ok",
                                  worker="someone-else@host")

    page = admin_client.get(detail(message)).content.decode()

    table = page[page.index('class="dp-table dp-attempts"'):]
    table = table[:table.index("</table>")]
    assert table.index("first@host") < table.index("second@host") and "someone-else" not in page
    assert "&lt;script&gt;alert(&#x27;receiver&#x27;)&lt;/script&gt;" in table and "<script>alert" not in page
    assert "x" * 299 + "…" in table and "x" * 300 not in table  # shortened: the API gives it whole
    assert "5,000 ms" in table and "http_status" in table and ">500<" in table and ">retry<" in table
    empty = admin_client.get(detail(other)).content.decode()
    assert "someone-else@host" in empty
    (none,) = make_rows(1)
    assert "none recorded yet" in admin_client.get(detail(none)).content.decode()


def test_detail_shows_the_newest_attempts_of_a_message_resent_many_times(admin_client, make_rows, monkeypatch):
    from scheduling.admin.messages import ScheduledMessageAdmin

    monkeypatch.setattr(ScheduledMessageAdmin, "ATTEMPTS_SHOWN", 2)
    (message,) = make_rows(1, status=Status.DELIVERED)
    now = timezone.now()
    for n in range(3):
        MessageAttempt.objects.create(message=message, number=1, trigger="manual", started_at=now + timedelta(seconds=n),
                                      duration_ms=1, outcome="ok", worker=f"w{n}@host")
    page = admin_client.get(detail(message)).content.decode()
    assert "w0@host" not in page and page.index("w1@host") < page.index("w2@host")
    assert f"the newest 2 (older ones: GET /api/messages/{message.pk}/attempts/)" in page


def test_resend_button_sends_a_delivered_message_again_as_a_manual_attempt(admin_client, make_rows):
    (delivered,) = make_rows(1, status=Status.DELIVERED, attempts=1, delivered_at=timezone.now(), lateness_ms=7)
    (failed,) = make_rows(1, status=Status.FAILED)
    (pending,) = make_rows(1)
    page = admin_client.get(detail(delivered)).content.decode()
    assert 'value="resend"' in page and 'value="republish"' not in page
    assert 'value="resend"' not in admin_client.get(detail(failed)).content.decode()  # Republish is its button
    assert 'value="resend"' not in admin_client.get(detail(pending)).content.decode()

    response = admin_client.post(reverse("admin:scheduling_scheduledmessage_action", args=[delivered.pk, "resend"]),
                                 follow=True)

    assert "Resent: 1" in [str(m) for m in response.context["messages"]]
    delivered.refresh_from_db()
    assert (delivered.status, delivered.trigger, delivered.attempts, delivered.lateness_ms) == (
        Status.PENDING, "manual", 0, None)
    assert AuditEvent.objects.get(action="message.resend").object_id == str(delivered.pk)


def test_resend_action_says_why_it_left_a_message_alone(admin_client, make_rows, versions):
    tasks = Endpoint.objects.create(name="tasks", queue="tasks", topology=versions["v3"],
                                    handler=Endpoint.Handler.CELERY_QUEUE)
    (task,) = make_rows(1, endpoint=tasks, status=Status.DELIVERED, payload={"task": "testapp.add"})
    (pending,) = make_rows(1)
    assert 'value="resend"' not in admin_client.get(detail(task)).content.decode()
    response = admin_client.post(LIST, {"action": "resend", "_selected_action": [task.pk, pending.pk]}, follow=True)
    shown = [str(m) for m in response.context["messages"]]
    assert any("is a Celery task" in m for m in shown) and any("only delivered or failed" in m for m in shown)
    assert dict(ScheduledMessage.objects.filter(pk__in=[task.pk, pending.pk]).values_list("pk", "status")) == {
        task.pk: Status.DELIVERED, pending.pk: Status.PENDING}


def test_republish_button_marks_the_next_attempt_manual(admin_client, make_rows):
    (failed,) = make_rows(1, status=Status.FAILED)
    admin_client.post(reverse("admin:scheduling_scheduledmessage_action", args=[failed.pk, "republish"]))
    failed.refresh_from_db()
    assert (failed.status, failed.trigger) == (Status.PENDING, "manual")

"""Endpoints in the admin: create/edit with the API's validation, the queue bound on the real
broker before the row exists, activate/deactivate, and counts by status without N+1."""

import re

import pytest
from django.urls import reverse

from scheduling.config.conf import broker
from scheduling.models import AuditEvent, Endpoint, EndpointHealth, ScheduledMessage
from scheduling.security import secret_box, webhook_signing
from topology import cascade

pytestmark = pytest.mark.django_db
LIST = reverse("admin:scheduling_endpoint_changelist")
ADD = reverse("admin:scheduling_endpoint_add")
V2_DELIVERY = cascade.delivery_exchange(cascade.V2.prefix)


def bound_keys() -> set[str]:
    return {b["routing_key"] for b in broker().management.bindings_from(broker().vhost, V2_DELIVERY)}


def form_errors(response) -> dict:
    return response.context["adminform"].form.errors


@pytest.mark.broker
def test_create_binds_the_queue_then_saves(admin_client, platform, endpoint_name):
    response = admin_client.post(ADD, {"name": endpoint_name, "topology": "v2", "handler": "webhook",
                                       "handler_target": "http://127.0.0.1:9/hook", "is_active": "on"})
    endpoint = Endpoint.objects.get(name=endpoint_name)
    assert response.status_code == 302 and response.url == reverse("admin:scheduling_endpoint_change",
                                                                   args=[endpoint.pk])
    assert f"#.default--{endpoint_name}" in bound_keys()  # the default team's queue
    secret = secret_box.open(endpoint.webhook_secret)  # stored sealed
    assert secret.startswith("whsec_") and endpoint.webhook_secret.startswith("enc1:")  # generated, as the API does
    assert secret not in admin_client.get(response.url).content.decode()


@pytest.mark.parametrize("data,field,text", [
    ({"name": "bad.name"}, "topology", "v2 cannot carry the dotted name 'bad.name'"),
    ({"name": "bad..name"}, "name", "would break routing"),
    ({"name": "bad#name"}, "name", "would break routing"),
    ({"handler": "webhook"}, "handler_target", "required for the webhook handler"),
    ({"handler": "webhook", "handler_target": "ftp://x"}, "handler_target", "must be an http(s) URL"),
    ({"handler": "celery_task"}, "handler_target", "required for the celery_task handler"),
    ({"handler": "webhook", "handler_target": "http://169.254.169.254/latest/meta-data/"}, "handler_target",
     "169.254.169.254 is a link-local address; allow its network in DELAY_WEBHOOK_ALLOWED_NETWORKS"),
    ({"handler": "celery_task", "handler_target": "os.system"}, "handler_target", "DELAY_CELERY_TASK_ALLOWLIST"),
    ({"handler": "webhook", "handler_target": "http://127.0.0.1:9/hook", "webhook_secret": "plain-text-secret-1"},
     "webhook_secret", "must be whsec_"),
])
@pytest.mark.broker
def test_create_refuses_what_the_api_refuses(admin_client, platform, endpoint_name, data, field, text):
    response = admin_client.post(ADD, {"name": endpoint_name, "topology": "v2", "handler": "none", **data})
    assert response.status_code == 200 and not Endpoint.objects.exists()
    assert any(text in e for e in form_errors(response)[field]), form_errors(response)
    assert f"#.default--{data.get('name', endpoint_name)}" not in bound_keys()


@pytest.mark.broker
def test_create_on_an_unprovisioned_cascade_is_a_form_error_not_a_crash(admin_client, versions, rabbit_vhost,
                                                                      endpoint_name):
    versions["v1"].prefix = "never-provisioned."
    versions["v1"].save()
    response = admin_client.post(ADD, {"name": endpoint_name, "topology": "v1", "handler": "none"})
    assert response.status_code == 200 and not Endpoint.objects.exists()
    assert "provision the cascade first" in form_errors(response)["__all__"][0]


def test_duplicate_name_is_a_field_error(admin_client, endpoint_row):
    response = admin_client.post(ADD, {"name": endpoint_row.name, "topology": "v2", "handler": "none"})
    assert "has an endpoint" in form_errors(response)["name"][0]


def test_edit_validates_like_create_and_keeps_the_name(admin_client, endpoint_row):
    url = reverse("admin:scheduling_endpoint_change", args=[endpoint_row.pk])
    bad = admin_client.post(url, {"topology": "v2", "handler": "webhook", "handler_target": ""})
    assert "required for the webhook handler" in form_errors(bad)["handler_target"][0]
    inside = admin_client.post(url, {"topology": "v2", "handler": "webhook", "handler_target": "http://10.0.0.1/"})
    assert "10.0.0.1 is a private address" in form_errors(inside)["handler_target"][0]
    good = admin_client.post(url, {"topology": "v2", "handler": "celery_task", "handler_target": "testapp.record_receipt"})
    assert good.status_code == 302
    endpoint_row.refresh_from_db()
    assert (endpoint_row.handler, endpoint_row.handler_target) == ("celery_task", "testapp.record_receipt")


def test_edit_sets_the_per_key_limits_as_the_api_does(admin_client, endpoint_row):
    url = reverse("admin:scheduling_endpoint_change", args=[endpoint_row.pk])
    refused = admin_client.post(url, {"topology": "v2", "handler": "none", "max_concurrent_per_key": "2"})
    assert "applies to webhook endpoints only" in form_errors(refused)["max_concurrent_per_key"][0]
    good = admin_client.post(url, {"topology": "v2", "handler": "none", "max_deliveries_per_second_per_key": "5"})
    assert good.status_code == 302
    endpoint_row.refresh_from_db()
    assert (endpoint_row.max_deliveries_per_second_per_key, endpoint_row.max_concurrent_per_key) == (5, None)
    assert "5/s per key" in admin_client.get(LIST).content.decode()


def test_rotating_a_secret_shows_the_new_one_once(admin_client, endpoint_row, staff_client):
    old = webhook_signing.generate_secret()
    Endpoint.objects.filter(pk=endpoint_row.pk).update(handler="webhook", handler_target="http://127.0.0.1:9/hook",
                                                       webhook_secret=secret_box.seal(old))
    change = reverse("admin:scheduling_endpoint_change", args=[endpoint_row.pk])
    assert "Rotate webhook secret" in admin_client.get(change).content.decode()
    response = admin_client.post(reverse("admin:scheduling_endpoint_action", args=[endpoint_row.pk, "rotate_secret"]))
    row = Endpoint.objects.get(pk=endpoint_row.pk)
    new = secret_box.open(row.webhook_secret)
    assert response.status_code == 200 and new != old and secret_box.open(row.webhook_secret_previous) == old
    page = response.content.decode()
    assert new in page and old not in page and "no-store" in response["Cache-Control"]
    assert row.webhook_secret not in page  # the plaintext is shown, not the sealed text
    assert new not in admin_client.get(change).content.decode()
    reader = staff_client("viewer")
    assert reader.post(reverse("admin:scheduling_endpoint_action", args=[endpoint_row.pk, "rotate_secret"])) \
        .status_code == 403
    assert Endpoint.objects.get(pk=endpoint_row.pk).webhook_secret == row.webhook_secret


def test_rotate_is_offered_for_webhook_endpoints_only(admin_client, endpoint_row):
    change = reverse("admin:scheduling_endpoint_change", args=[endpoint_row.pk])
    assert "Rotate webhook secret" not in admin_client.get(change).content.decode()
    response = admin_client.post(LIST, {"action": "rotate_secret", "_selected_action": [endpoint_row.pk]}, follow=True)
    assert any("only webhook endpoints" in str(m) for m in response.context["messages"])
    assert Endpoint.objects.get(pk=endpoint_row.pk).webhook_secret == ""


@pytest.mark.broker
def test_deactivate_then_activate_rebinds_the_queue(admin_client, platform, amqp, endpoint_name):
    from scheduling.endpoints.services import endpoint_create

    endpoint = endpoint_create(name=endpoint_name)
    admin_client.post(LIST, {"action": "deactivate", "_selected_action": [endpoint.pk]})
    endpoint.refresh_from_db()
    assert not endpoint.is_active
    amqp.unbind(cascade.endpoint_binding(cascade.V2, endpoint.queue))  # lost, e.g. queue recreated by hand
    assert f"#.{endpoint.queue}" not in bound_keys()
    response = admin_client.post(reverse("admin:scheduling_endpoint_action", args=[endpoint.pk, "activate"]),
                                 follow=True)
    endpoint.refresh_from_db()
    assert endpoint.is_active and f"#.{endpoint.queue}" in bound_keys()
    assert "Activated: 1" in [str(m) for m in response.context["messages"]]


def test_list_counts_messages_by_status_in_a_fixed_number_of_queries(admin_client, make_rows, versions,
                                                                     django_assert_max_num_queries):
    make_rows(2)
    make_rows(3, status=ScheduledMessage.Status.DELIVERED)
    with django_assert_max_num_queries(12) as few:
        response = admin_client.get(LIST)
    page = response.content.decode()
    assert 'status__exact=pending">2</a>' in page and 'status__exact=delivered">3</a>' in page
    for i in range(30):
        Endpoint.objects.create(name=f"more-{i}", queue=f"more-{i}", topology=versions["v1"])
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert "31 endpoints" in admin_client.get(LIST).content.decode()


@pytest.mark.broker
def test_switching_an_endpoint_to_the_timeout_manager_and_back(admin_client, platform, endpoint_name, amqp):
    admin_client.post(ADD, {"name": endpoint_name, "topology": "v2", "handler": "none", "is_active": "on"})
    endpoint = Endpoint.objects.get(name=endpoint_name)
    change = reverse("admin:scheduling_endpoint_change", args=[endpoint.pk])
    try:
        response = admin_client.post(change, {"topology": "v1", "delivery_mode": "timeout_manager", "handler": "none"})
        assert response.status_code == 302
        endpoint.refresh_from_db()
        assert (endpoint.topology.name, endpoint.delivery_mode) == ("v1", "timeout_manager")
        assert "timeout manager" in admin_client.get(change).content.decode()
        admin_client.post(change, {"topology": "v1", "delivery_mode": "native", "handler": "none"})
        endpoint.refresh_from_db()
        assert endpoint.delivery_mode == "native"
    finally:
        amqp.delete_queue(f"default--{endpoint_name}")


def test_counts_past_the_cap_are_shown_as_estimates(admin_client, make_rows, monkeypatch):
    monkeypatch.setattr("scheduling.endpoints.selectors.ENDPOINT_COUNT_CAP", 2)
    make_rows(3, status=ScheduledMessage.Status.DELIVERED)
    make_rows(1)
    page = admin_client.get(LIST).content.decode()
    assert 'status__exact=pending">1</a>' in page
    assert re.search(r'status__exact=delivered" title="PostgreSQL\'s estimate">≈ [\d,]+</a>', page)


def _disable(endpoint):
    """As the engine does after days of failures: inactive, disabled, its health failing."""
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    Endpoint.objects.filter(pk=endpoint.pk).update(is_active=False, disabled_at=now,
                                                   disabled_reason="<b>every call failed</b> for 5 days")
    EndpointHealth.objects.create(endpoint=endpoint, consecutive_failures=812, failing_since=now - timedelta(days=5),
                                  paused_until=now + timedelta(minutes=10), circuit_opened=7,
                                  last_error="HTTP 503: <i>busy</i>")


@pytest.mark.broker
def test_a_disabled_endpoint_has_a_banner_its_health_and_enable_resumes_it(admin_client, platform, amqp,
                                                                           endpoint_name):
    from scheduling.endpoints.services import endpoint_create

    endpoint = endpoint_create(name=endpoint_name, topology="v2")
    change = reverse("admin:scheduling_endpoint_change", args=[endpoint.pk])
    assert "Disabled by the platform" not in admin_client.get(change).content.decode()
    _disable(endpoint)
    amqp.unbind(cascade.endpoint_binding(cascade.V2, endpoint.queue))

    response = admin_client.get(change)
    page = response.content.decode()
    (banner,) = [m for m in response.context["messages"] if m.level_tag == "warning"]
    assert "Disabled by the platform at" in str(banner) and "every call failed" in str(banner)
    assert "&lt;b&gt;every call failed" in page and "<b>every call failed" not in page  # escaped
    health = page[page.index('id="dp-endpoint-health"'):]
    assert "812" in health and "HTTP 503: &lt;i&gt;busy&lt;/i&gt;" in health
    assert 'value="enable"' in page and 'value="activate"' not in page
    listed = admin_client.get(LIST)
    assert any(endpoint_name in str(m) and m.level_tag == "warning" for m in listed.context["messages"])

    response = admin_client.post(reverse("admin:scheduling_endpoint_action", args=[endpoint.pk, "enable"]),
                                 follow=True)

    assert "Enabled: 1" in [str(m) for m in response.context["messages"]]
    endpoint.refresh_from_db()
    assert (endpoint.is_active, endpoint.disabled_at, endpoint.disabled_reason) == (True, None, "")
    health = EndpointHealth.objects.get(endpoint=endpoint)
    assert (health.consecutive_failures, health.failing_since, health.paused_until, health.circuit_opened) == (
        0, None, None, 0)
    assert f"#.{endpoint.queue}" in bound_keys()
    assert AuditEvent.objects.get(action="endpoint.enable").source == "admin"
    assert not [m for m in admin_client.get(change).context["messages"] if m.level_tag == "warning"]
    assert not [m for m in admin_client.get(LIST).context["messages"] if m.level_tag == "warning"]


def test_a_viewer_sees_the_health_but_no_enable(readonly_client, endpoint_row):
    _disable(endpoint_row)
    page = readonly_client.get(reverse("admin:scheduling_endpoint_change", args=[endpoint_row.pk])).content.decode()
    assert "Disabled by the platform" in page and 'id="dp-endpoint-health"' in page
    assert 'value="enable"' not in page
    response = readonly_client.post(reverse("admin:scheduling_endpoint_action", args=[endpoint_row.pk, "enable"]))
    assert response.status_code == 403 and Endpoint.objects.get(pk=endpoint_row.pk).disabled_at is not None


def test_the_webhook_deadline_is_edited_on_the_form_within_the_maximum(admin_client, endpoint_row, settings):
    settings.DELAY_WEBHOOK_TIMEOUT_MAX_SECONDS = 20
    url = reverse("admin:scheduling_endpoint_change", args=[endpoint_row.pk])
    hook = {"topology": "v2", "handler": "webhook", "handler_target": "http://127.0.0.1:9/hook"}
    over = admin_client.post(url, {**hook, "webhook_timeout_seconds": "21"})
    assert "at most 20 s" in form_errors(over)["webhook_timeout_seconds"][0]
    assert admin_client.post(url, {**hook, "webhook_timeout_seconds": "0"}).status_code == 200  # under 0.1
    assert admin_client.post(url, {**hook, "webhook_timeout_seconds": "2.5"}).status_code == 302
    endpoint_row.refresh_from_db()
    assert endpoint_row.webhook_timeout_seconds == 2.5
    assert 'value="2.5"' in admin_client.get(url).content.decode()
    assert admin_client.post(url, {**hook, "webhook_timeout_seconds": ""}).status_code == 302
    endpoint_row.refresh_from_db()
    assert endpoint_row.webhook_timeout_seconds is None


SECRET_URL = "https://hooks.example.com/in?token=s3cret-token"


@pytest.mark.parametrize("role, shown", [("viewer", False), ("member", False), ("admin", True)])
def test_a_webhook_url_s_query_is_masked_below_the_team_s_admins(endpoint_row, staff_client, role, shown):
    Endpoint.objects.filter(pk=endpoint_row.pk).update(handler="webhook", handler_target=SECRET_URL)
    reader = staff_client(role, team=endpoint_row.team.name)
    pages = [reader.get(LIST).content.decode(),
             reader.get(reverse("admin:scheduling_endpoint_change", args=[endpoint_row.pk])).content.decode()]
    for page in pages:
        assert ("s3cret-token" in page) is shown
        assert shown or "https://hooks.example.com/in?token=***" in page


def test_the_handler_moves_to_celery_queue_only_with_nothing_in_flight(admin_client, endpoint_row, make_rows):
    """A form error naming how many are in flight (they were made for the handler they have), and
    the change once none is."""
    url = reverse("admin:scheduling_endpoint_change", args=[endpoint_row.pk])
    waiting = make_rows(2) + make_rows(1, status=ScheduledMessage.Status.PUBLISHED)
    make_rows(1, status=ScheduledMessage.Status.DELIVERED)
    refused = admin_client.post(url, {"topology": "v2", "handler": "celery_queue"})
    assert refused.status_code == 200
    assert "from none to celery_queue while 3 message(s) are in flight" in form_errors(refused)["handler"][0]
    endpoint_row.refresh_from_db()
    assert endpoint_row.handler == "none"
    ScheduledMessage.objects.filter(pk__in=[m.pk for m in waiting]).update(status=ScheduledMessage.Status.CANCELLED)
    assert admin_client.post(url, {"topology": "v2", "handler": "celery_queue"}).status_code == 302
    endpoint_row.refresh_from_db()
    assert endpoint_row.handler == "celery_queue"

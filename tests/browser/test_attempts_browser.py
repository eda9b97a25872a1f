"""What the delivery engine keeps, as an operator sees it in real headless Chromium on the live
server: a message's attempts on its page (and Resend), and an endpoint the platform disabled: the
warning on the list and on its page, its health, and Enable. The attempt and health rows are made
directly (writing them is the engine's, tested with it); the endpoint's queue and the resent copy
are real, on the run's RabbitMQ vhost. Pages are saved under artifacts/screenshots/."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.endpoints.services import endpoint_create
from scheduling.messages.services import message_schedule
from scheduling.models import Endpoint, EndpointHealth, MessageAttempt, ScheduledMessage

pytestmark = pytest.mark.django_db(transaction=True)


def test_operator_reads_a_message_s_attempts_resends_it_and_enables_a_disabled_endpoint(
    browser, admin_user, platform, endpoint_name
):
    endpoint = endpoint_create(name=endpoint_name, handler="webhook", handler_target="http://127.0.0.1:9/hook")
    message = message_schedule(endpoint=endpoint_name, payload={"invoice": 7}, delay=3600)
    now = timezone.now()
    ScheduledMessage.objects.filter(pk=message.pk).update(  # as if scheduled 10 minutes ago, due 2 minutes ago
        status="delivered", created_at=now - timedelta(minutes=10), due_at=now - timedelta(minutes=2),
        delivered_at=now, finished_at=now, attempts=1)
    MessageAttempt.objects.create(message=message, number=1, started_at=now - timedelta(seconds=70),
                                  duration_ms=5_002, outcome="http_status", status_code=503,
                                  excerpt="<h1>Service Unavailable</h1>", worker="celery@web-1")
    MessageAttempt.objects.create(message=message, number=2, trigger="retry", started_at=now - timedelta(seconds=60),
                                  duration_ms=38, outcome="ok", status_code=200, excerpt='{"received": true}',
                                  worker="celery@web-2")

    browser.login("admin", "pw")
    browser.open(f"/admin/scheduling/scheduledmessage/{message.pk}/change/")
    rows = [row.text for row in browser.find_all("table.dp-attempts tbody tr")]
    assert len(rows) == 2, browser.text()[:2000]
    assert rows[0].split()[:2] == ["1", "scheduled"] and "503" in rows[0] and "5,002 ms" in rows[0]
    assert "<h1>Service Unavailable</h1>" in rows[0]  # the receiver's HTML shown as text, not rendered
    assert not browser.find_all("table.dp-attempts h1")
    assert rows[1].split()[:2] == ["2", "retry"] and '{"received": true}' in rows[1] and "celery@web-2" in rows[1]
    browser.screenshot("50-message-attempts")

    browser.submit('button.dp-action-button[value="resend"]')
    assert "Resent: 1" in browser.messages(), browser.messages()
    resent = ScheduledMessage.objects.get(pk=message.pk)
    assert resent.status in ("pending", "published") and resent.trigger == "manual"
    assert not browser.find_all('button.dp-action-button[value="resend"]')  # on its way again
    assert len(browser.find_all("table.dp-attempts tbody tr")) == 2  # its attempts stay listed
    browser.screenshot("51-message-resent")

    Endpoint.objects.filter(pk=endpoint.pk).update(is_active=False, disabled_at=now,
                                                   disabled_reason="every call failed for 5 days: HTTP 503")
    EndpointHealth.objects.create(endpoint=endpoint, consecutive_failures=812, failing_since=now - timedelta(days=5),
                                  paused_until=now + timedelta(minutes=10), circuit_opened=7,
                                  last_error="HTTP 503: Service Unavailable")
    browser.open("/admin/scheduling/endpoint/")
    (warning,) = [m for m in browser.messages() if "Disabled by the platform" in m]
    assert f"default/{endpoint_name}" in warning
    browser.screenshot("52-endpoints-one-disabled")
    browser.open(f"/admin/scheduling/endpoint/{endpoint.pk}/change/")
    assert any("every call failed for 5 days" in m for m in browser.messages()), browser.messages()
    health = browser.find("#dp-endpoint-health").text
    assert "consecutive failures 812" in health and "HTTP 503: Service Unavailable" in health
    assert not browser.find_all('button.dp-action-button[value="activate"]')  # Enable says what it does
    browser.screenshot("53-endpoint-disabled")

    browser.submit('button.dp-action-button[value="enable"]')
    assert "Enabled: 1" in browser.messages(), browser.messages()
    assert not [m for m in browser.messages() if "Disabled by the platform" in m]
    assert "consecutive failures 0" in browser.find("#dp-endpoint-health").text
    endpoint.refresh_from_db()
    assert (endpoint.is_active, endpoint.disabled_at, endpoint.disabled_reason) == (True, None, "")
    assert EndpointHealth.objects.get(endpoint=endpoint).paused_until is None
    browser.screenshot("54-endpoint-enabled")

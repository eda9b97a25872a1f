"""An endpoint's webhook deadline, its health and its disabled state, through the API: the
deadline is set, read, cleared and refused over the platform's maximum (400 naming the field);
health and the disabled state are read-only; PATCH is_active true enables an endpoint the
platform disabled (disabled state cleared, health reset, audited, its queue bound again). The
disabled state and the health rows are made directly: writing them is the delivery engine's."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.config.conf import broker
from scheduling.models import AuditEvent, Endpoint, EndpointHealth
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture
def hook(api, platform, endpoint_name, amqp):
    response = api.post("/api/endpoints/", {"name": endpoint_name, "handler": "webhook", "handler_target": HOOK},
                        format="json")
    assert response.status_code == 201, response.content
    yield endpoint_name
    amqp.delete_queue(f"default--{endpoint_name}")


def disable(name: str) -> Endpoint:
    """As the engine does after days of failures: inactive, disabled, its health failing."""
    now = timezone.now()
    Endpoint.objects.filter(name=name).update(is_active=False, disabled_at=now - timedelta(minutes=1),
                                              disabled_reason="every call failed for 5 days: HTTP 503")
    endpoint = Endpoint.objects.get(name=name)
    EndpointHealth.objects.create(endpoint=endpoint, consecutive_failures=812, failing_since=now - timedelta(days=5),
                                  paused_until=now + timedelta(minutes=10), circuit_opened=7,
                                  last_success_at=now - timedelta(days=6), last_failure_at=now,
                                  last_error="HTTP 503: busy")
    return endpoint


def test_the_webhook_deadline_is_set_read_cleared_and_refused_over_the_maximum(api, hook, settings):
    settings.DELAY_WEBHOOK_TIMEOUT_MAX_SECONDS = 30
    assert api.get(f"/api/endpoints/{hook}/").json()["webhook_timeout_seconds"] is None  # the platform's
    changed = api.patch(f"/api/endpoints/{hook}/", {"webhook_timeout_seconds": 2.5}, format="json")
    assert changed.status_code == 200 and changed.json()["webhook_timeout_seconds"] == 2.5
    assert Endpoint.objects.get(name=hook).webhook_timeout_seconds == 2.5
    for bad, says in ((31, "at most 30 s (DELAY_WEBHOOK_TIMEOUT_MAX_SECONDS)"), (0, "greater than or equal to 0.1"),
                      ("soon", "valid number"), ("NaN", "valid number")):
        refused = api.patch(f"/api/endpoints/{hook}/", {"webhook_timeout_seconds": bad}, format="json")
        assert refused.status_code == 400 and list(refused.json()) == ["webhook_timeout_seconds"], refused.json()
        assert says in refused.json()["webhook_timeout_seconds"][0]
    assert Endpoint.objects.get(name=hook).webhook_timeout_seconds == 2.5
    kept = api.patch(f"/api/endpoints/{hook}/", {"max_concurrent": 4}, format="json")  # not named: unchanged
    assert kept.json()["webhook_timeout_seconds"] == 2.5
    cleared = api.patch(f"/api/endpoints/{hook}/", {"webhook_timeout_seconds": None}, format="json")
    assert cleared.json()["webhook_timeout_seconds"] is None


def test_the_webhook_deadline_is_given_at_creation_and_only_to_webhooks(api, platform, endpoint_name, amqp):
    body = {"name": endpoint_name, "handler": "webhook", "handler_target": HOOK}
    over = api.post("/api/endpoints/", {**body, "webhook_timeout_seconds": 61}, format="json")  # max 60 by default
    assert over.status_code == 400 and list(over.json()) == ["webhook_timeout_seconds"]
    plain = api.post("/api/endpoints/", {"name": endpoint_name, "webhook_timeout_seconds": 5}, format="json")
    assert plain.status_code == 400 and "webhook endpoints only" in plain.json()["webhook_timeout_seconds"][0]
    assert not Endpoint.objects.exists()
    try:
        made = api.post("/api/endpoints/", {**body, "webhook_timeout_seconds": 12}, format="json")
        assert made.status_code == 201 and made.json()["webhook_timeout_seconds"] == 12
    finally:
        amqp.delete_queue(f"default--{endpoint_name}")


def test_health_and_the_disabled_state_are_shown_read_only(api, hook):
    fresh = api.get(f"/api/endpoints/{hook}/").json()
    assert (fresh["disabled_at"], fresh["disabled_reason"], fresh["is_active"]) == (None, "", True)
    assert fresh["health"] == {"consecutive_failures": 0, "failing_since": None, "paused_until": None,
                               "circuit_opened": 0, "last_success_at": None, "last_failure_at": None, "last_error": ""}
    endpoint = disable(hook)
    shown = api.get(f"/api/endpoints/{hook}/").json()
    assert shown["is_active"] is False and shown["disabled_reason"] == "every call failed for 5 days: HTTP 503"
    assert shown["disabled_at"] == endpoint.disabled_at.isoformat().replace("+00:00", "Z")
    assert (shown["health"]["consecutive_failures"], shown["health"]["circuit_opened"],
            shown["health"]["last_error"]) == (812, 7, "HTTP 503: busy")
    ignored = api.patch(f"/api/endpoints/{hook}/", {"disabled_at": None, "disabled_reason": "",
                                                    "health": {"consecutive_failures": 0}}, format="json")
    assert ignored.status_code == 200
    row = Endpoint.objects.get(name=hook)
    assert row.disabled_at == endpoint.disabled_at and not row.is_active
    assert EndpointHealth.objects.get(endpoint=row).consecutive_failures == 812


def test_patch_is_active_true_enables_a_disabled_endpoint_and_resets_its_health(api, hook, amqp):
    endpoint = disable(hook)
    queue = endpoint.queue
    amqp.unbind(cascade.endpoint_binding(cascade.V3, queue))  # lost meanwhile: enabling binds it again
    assert "dp.v3.delay-delivery" not in {b["source"] for b in broker().management.bindings(broker().vhost)
                                          if b["destination"] == queue}
    response = api.patch(f"/api/endpoints/{hook}/", {"is_active": True}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["is_active"], body["disabled_at"], body["disabled_reason"]) == (True, None, "")
    row = Endpoint.objects.get(name=hook)
    assert (row.is_active, row.disabled_at, row.disabled_reason) == (True, None, "")
    health = EndpointHealth.objects.get(endpoint=row)
    assert (health.consecutive_failures, health.failing_since, health.paused_until, health.circuit_opened) == (
        0, None, None, 0)
    assert health.last_error == "HTTP 503: busy" and health.last_success_at is not None  # history kept
    assert body["health"]["consecutive_failures"] == 0
    bound = {b["source"] for b in broker().management.bindings(broker().vhost) if b["destination"] == queue}
    assert "dp.v3.delay-delivery" in bound
    event = AuditEvent.objects.get(action="endpoint.enable")
    assert event.object_id == str(row.pk) and event.before["disabled_reason"].startswith("every call failed")
    assert event.before["health"]["consecutive_failures"] == 812 and event.after["disabled_at"] is None


def test_activate_enables_a_disabled_endpoint_too_and_false_pauses_it(api, hook):
    disable(hook)
    assert api.post(f"/api/endpoints/{hook}/activate/").json()["disabled_at"] is None
    assert EndpointHealth.objects.get(endpoint__name=hook).consecutive_failures == 0
    paused = api.patch(f"/api/endpoints/{hook}/", {"is_active": False}, format="json")
    assert paused.status_code == 200 and paused.json()["is_active"] is False
    row = Endpoint.objects.get(name=hook)
    assert not row.is_active and row.disabled_at is None  # a person's pause is no platform disable
    assert api.patch(f"/api/endpoints/{hook}/", {"is_active": "maybe"}, format="json").status_code == 400


def test_only_the_team_s_admins_enable_and_another_team_gets_a_404(api_as, team_key, hook):
    disable(hook)
    member = api_as("member")  # endpoints are their team's admins'
    assert member.patch(f"/api/endpoints/{hook}/", {"is_active": True}, format="json").status_code == 403
    other = team_key(f"other-{uuid.uuid4().hex[:6]}")
    assert other.patch(f"/api/endpoints/{hook}/", {"is_active": True}, format="json").status_code == 404
    assert other.get(f"/api/endpoints/{hook}/").status_code == 404
    assert Endpoint.objects.get(name=hook).disabled_at is not None
    assert not AuditEvent.objects.filter(action="endpoint.enable").exists()


def test_the_list_reads_every_endpoint_s_health_in_its_own_query(api, platform, amqp):
    names = [f"h-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    try:
        for name in names:
            assert api.post("/api/endpoints/", {"name": name, "handler": "webhook", "handler_target": HOOK},
                            format="json").status_code == 201
            disable(name)
        with CaptureQueriesContext(connection) as captured:
            listed = api.get("/api/endpoints/").json()["results"]
        assert {e["name"]: e["health"]["consecutive_failures"] for e in listed} == {name: 812 for name in names}
        health_reads = [q for q in captured.captured_queries if "scheduling_endpointhealth" in q["sql"]]
        assert len(health_reads) == 1  # joined to the page's endpoints, not one query per endpoint
    finally:
        for name in names:
            amqp.delete_queue(f"default--{name}")

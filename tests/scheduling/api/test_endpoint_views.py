"""The endpoints' API (/api/endpoints/): creation binds a real queue on every provisioned
version; webhook secrets are answered once and never read back; validation, permissions, flow
control, version and handler changes."""

import json
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.config.conf import broker
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.models.audit import AuditEvent
from scheduling.security import secret_box
from tests.scheduling.messages.test_selectors import assert_no_exact_count

pytestmark = [pytest.mark.django_db, pytest.mark.broker]


def test_create_endpoint_binds_its_queue_on_every_provisioned_version(api, platform, endpoint_name, amqp):
    response = api.post("/api/endpoints/", {"name": endpoint_name, "topology": "v2"}, format="json")
    try:
        assert response.status_code == 201
        assert response.json()["topology"] == "v2" and response.json()["handler"] == "none"
        queue = f"default--{endpoint_name}"  # the team's own queue
        assert response.json()["queue"] == queue and response.json()["team"] == "default"
        bindings = {(b["source"], b["routing_key"]) for b in broker().management.bindings(broker().vhost)
                    if b["destination"] == queue and b["source"]}
        assert bindings == {("dp.v2.delay-delivery", f"#.{queue}"), ("dp.delay-delivery", f"#.{queue}"),
                            ("dp.v3.delay-delivery", queue)}
    finally:
        amqp.delete_queue(f"default--{endpoint_name}")


def test_new_endpoints_are_on_v3_and_a_dotted_name_is_bound_on_v3_only(api, platform, amqp):
    name = f"orders.{uuid.uuid4().hex[:8]}.eu"
    response = api.post("/api/endpoints/", {"name": name}, format="json")
    try:
        assert response.status_code == 201 and response.json()["topology"] == "v3"
        bindings = {(b["source"], b["routing_key"]) for b in broker().management.bindings(broker().vhost)
                    if b["destination"] == f"default--{name}" and b["source"]}
        assert bindings == {("dp.v3.delay-delivery", f"default--{name}")}
        moved = api.patch(f"/api/endpoints/{name}/", {"topology": "v2"}, format="json")
        assert moved.status_code == 400 and "dotted name" in moved.json()["topology"][0]
        assert Endpoint.objects.get(name=name).topology.name == "v3"
    finally:
        amqp.delete_queue(f"default--{name}")


def test_webhook_secret_is_generated_answered_once_and_never_read(api, platform, endpoint_name, amqp):
    body = {"name": endpoint_name, "handler": "webhook", "handler_target": "https://example.com/hook"}
    try:
        response = api.post("/api/endpoints/", body, format="json")
        assert response.status_code == 201
        secret = response.json()["webhook_secret"]
        stored = Endpoint.objects.get(name=endpoint_name).webhook_secret
        assert secret.startswith("whsec_") and secret == secret_box.open(stored) and secret not in stored
        assert secret not in api.get(f"/api/endpoints/{endpoint_name}/").content.decode()
        assert secret not in api.get("/api/endpoints/").content.decode()
        plain = api.post("/api/endpoints/", {"name": f"{endpoint_name}-2"}, format="json")
        assert plain.status_code == 201 and "webhook_secret" not in plain.json()
    finally:
        amqp.delete_queue(f"default--{endpoint_name}")
        amqp.delete_queue(f"default--{endpoint_name}-2")


INSIDE = ["http://127.0.0.1:8000/hook", "http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/",
          "http://[::1]/", "http://localhost:8000/hook"]


@pytest.mark.parametrize("target", INSIDE)
def test_a_webhook_into_the_platforms_network_is_refused_until_allowed(api, platform, endpoint_name, amqp, settings,
                                                                       target):
    settings.DELAY_WEBHOOK_ALLOWED_NETWORKS = []
    body = {"name": endpoint_name, "handler": "webhook", "handler_target": target}
    response = api.post("/api/endpoints/", body, format="json")
    assert response.status_code == 400 and list(response.json()) == ["handler_target"]
    assert "DELAY_WEBHOOK_ALLOWED_NETWORKS" in response.json()["handler_target"][0]
    assert not Endpoint.objects.exists()
    settings.DELAY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32", "10.0.0.0/8", "169.254.169.254/32", "::1/128"]
    try:
        assert api.post("/api/endpoints/", body, format="json").status_code == 201
        assert Endpoint.objects.get(name=endpoint_name).handler_target == target
    finally:
        amqp.delete_queue(f"default--{endpoint_name}")


@pytest.mark.parametrize(("target", "says"), [
    ("http://user:pw@example.com/hook", "must not carry credentials"), ("file:///etc/passwd", "http(s) URL"),
])
def test_a_webhook_url_with_credentials_or_another_scheme_is_refused(api, platform, endpoint_name, target, says):
    response = api.post("/api/endpoints/", {"name": endpoint_name, "handler": "webhook", "handler_target": target},
                        format="json")
    assert response.status_code == 400 and says in response.json()["handler_target"][0]
    assert not Endpoint.objects.exists()


def test_only_allowed_celery_tasks_can_be_handlers(api, platform, endpoint_name, amqp, settings):
    body = {"name": endpoint_name, "handler": "celery_task"}
    refused = api.post("/api/endpoints/", {**body, "handler_target": "billing.tasks.charge"}, format="json")
    assert refused.status_code == 400 and "matches none of DELAY_CELERY_TASK_ALLOWLIST (testapp.*)" in \
        refused.json()["handler_target"][0]
    own = api.post("/api/endpoints/", {**body, "handler_target": "scheduling.relay.sweep"}, format="json")
    assert own.status_code == 400 and "never a handler" in own.json()["handler_target"][0]
    assert not Endpoint.objects.exists()
    try:
        allowed = api.post("/api/endpoints/", {**body, "handler_target": "testapp.record_receipt"}, format="json")
        assert allowed.status_code == 201 and allowed.json()["handler_target"] == "testapp.record_receipt"
    finally:
        amqp.delete_queue(f"default--{endpoint_name}")
    settings.DELAY_CELERY_TASK_ALLOWLIST = []
    empty = api.post("/api/endpoints/", {**body, "name": f"{endpoint_name}-2", "handler_target": "testapp.x"},
                     format="json")
    assert empty.status_code == 400 and "DELAY_CELERY_TASK_ALLOWLIST is empty" in empty.json()["handler_target"][0]


@pytest.fixture
def webhook_endpoint(api, platform, endpoint_name, amqp):
    name = f"{endpoint_name}-hook"
    response = api.post("/api/endpoints/", {"name": name, "handler": "webhook",
                                            "handler_target": "http://127.0.0.1:9/hook"}, format="json")
    assert response.status_code == 201, response.content
    yield name, response.json()["webhook_secret"]
    amqp.delete_queue(f"default--{name}")


def test_rotate_secret_answers_the_new_secret_once(api, webhook_endpoint):
    name, first = webhook_endpoint
    response = api.post(f"/api/endpoints/{name}/rotate-secret/", {"previous_valid_seconds": 600}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    row = Endpoint.objects.get(name=name)
    assert body["name"] == name and body["webhook_secret"] == secret_box.open(row.webhook_secret) != first
    assert secret_box.open(row.webhook_secret_previous) == first
    assert body["previous_valid_until"] == row.webhook_secret_previous_expires_at.isoformat().replace("+00:00", "Z")
    assert body["webhook_secret"] not in api.get(f"/api/endpoints/{name}/").content.decode()
    given = "whsec_" + "A" * 40
    default = api.post(f"/api/endpoints/{name}/rotate-secret/", {"secret": given}, format="json")
    assert default.status_code == 200 and default.json()["webhook_secret"] == given
    row.refresh_from_db()
    assert secret_box.open(row.webhook_secret_previous) == body["webhook_secret"]
    assert 86000 < (row.webhook_secret_previous_expires_at - row.updated_at).total_seconds() <= 86400  # a day
    audit = json.dumps([[e.before, e.after] for e in AuditEvent.objects.filter(object_id=str(row.pk))])
    assert "endpoint.rotate_secret" in AuditEvent.objects.values_list("action", flat=True)
    assert not [s for s in ("whsec_", "enc1:", first[6:], given[6:]) if s in audit]  # neither plaintext nor sealed


@pytest.mark.parametrize(("body", "field"), [
    ({"secret": "not-a-standard-secret"}, "secret"), ({"secret": "whsec_" + "A" * 8}, "secret"),
    ({"previous_valid_seconds": -5}, "previous_valid_seconds"), ({"previous_valid_seconds": "soon"},
                                                                 "previous_valid_seconds"),
    ({"previous_valid_seconds": 10**9}, "previous_valid_seconds"),
])
def test_rotate_secret_refuses_bad_input_and_changes_nothing(api, webhook_endpoint, body, field):
    name, secret = webhook_endpoint
    response = api.post(f"/api/endpoints/{name}/rotate-secret/", body, format="json")
    assert response.status_code == 400 and list(response.json()) == [field], response.json()
    row = Endpoint.objects.get(name=name)
    assert (secret_box.open(row.webhook_secret), row.webhook_secret_previous) == (secret, "")


def test_rotate_secret_needs_change_permission_and_a_webhook(api, api_as, webhook_endpoint, endpoint):
    name, secret = webhook_endpoint
    member = api_as("member")  # endpoints are their team's admins'
    assert member.post(f"/api/endpoints/{name}/rotate-secret/", {}, format="json").status_code == 403
    assert secret_box.open(Endpoint.objects.get(name=name).webhook_secret) == secret
    response = api.post(f"/api/endpoints/{endpoint}/rotate-secret/", {}, format="json")
    assert response.status_code == 400 and "only webhook endpoints" in response.json()["handler"][0]


@pytest.mark.parametrize(
    ("body", "field"),
    [({"name": "a.b", "topology": "v2"}, "topology"), ({"name": "a..b"}, "name"), ({"name": "a#"}, "name"),
     ({"name": "*"}, "name"), ({"name": ""}, "name"), ({"name": "bit:05"}, "name"),
     ({"name": "ok", "topology": "v9"}, "topology"), ({"name": "ok", "handler": "celery_task"}, "handler_target"),
     ({"name": "ok", "handler": "webhook", "handler_target": "ftp://x"}, "handler_target"),
     ({"name": "ok", "handler": "shell"}, "handler"),
     ({"name": "ok", "max_deliveries_per_second": 0}, "max_deliveries_per_second"),
     ({"name": "ok", "max_deliveries_per_second": 100_001}, "max_deliveries_per_second"),
     ({"name": "ok", "max_deliveries_per_second": "fast"}, "max_deliveries_per_second"),
     ({"name": "ok", "handler": "webhook", "handler_target": "http://127.0.0.1:9/h", "max_concurrent": 0},
      "max_concurrent"),
     ({"name": "ok", "max_concurrent": 2}, "max_concurrent"),  # no calls to count: webhooks only
     ({"name": "ok", "handler": "celery_queue", "max_deliveries_per_second": 5}, "max_deliveries_per_second")],
)
def test_bad_endpoint_is_400_naming_the_field(api, platform, body, field):
    response = api.post("/api/endpoints/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.json()
    assert not Endpoint.objects.exists()


def test_flow_control_is_set_read_and_cleared(api, webhook_endpoint):
    name, _ = webhook_endpoint
    assert api.get(f"/api/endpoints/{name}/").json()["max_deliveries_per_second"] is None
    changed = api.patch(f"/api/endpoints/{name}/", {"max_deliveries_per_second": 50, "max_concurrent": 3},
                        format="json")
    assert changed.status_code == 200
    assert (changed.json()["max_deliveries_per_second"], changed.json()["max_concurrent"]) == (50, 3)
    refused = api.patch(f"/api/endpoints/{name}/", {"max_concurrent": 1001}, format="json")
    assert refused.status_code == 400 and "max_concurrent" in refused.json()
    kept = api.patch(f"/api/endpoints/{name}/", {"topology": "v2"}, format="json")  # not named: unchanged
    assert (kept.json()["max_deliveries_per_second"], kept.json()["max_concurrent"]) == (50, 3)
    cleared = api.patch(f"/api/endpoints/{name}/", {"max_deliveries_per_second": None}, format="json")
    assert (cleared.json()["max_deliveries_per_second"], cleared.json()["max_concurrent"]) == (None, 3)
    assert Endpoint.objects.get(name=name).max_concurrent == 3


def test_duplicate_endpoint_name(api, endpoint):
    response = api.post("/api/endpoints/", {"name": endpoint}, format="json")
    assert response.status_code == 400 and "name" in response.json()


def test_endpoint_without_its_cascade_is_a_conflict_and_not_stored(api, versions, rabbit_vhost):
    versions["v1"].prefix = "missing."
    versions["v1"].save()
    response = api.post("/api/endpoints/", {"name": "lonely", "topology": "v1"}, format="json")
    assert response.status_code == 409 and "provision the cascade first" in response.json()["detail"]
    assert not Endpoint.objects.exists()


def test_endpoint_counts_above_the_cap_are_estimates_and_say_so(api, endpoint, monkeypatch):
    api.post("/api/messages/bulk/", {"messages": [{"endpoint": endpoint, "payload": i, "delay_seconds": 9}
                                                  for i in range(5)]}, format="json")
    monkeypatch.setattr("scheduling.endpoints.selectors.ENDPOINT_COUNT_CAP", 3)
    with CaptureQueriesContext(connection) as captured:
        listed = api.get("/api/endpoints/").json()["results"]
    assert_no_exact_count([q for q in captured.captured_queries if "scheduling_scheduledmessage" in q["sql"]])
    (answer,) = [e for e in listed if e["name"] == endpoint]
    assert answer["message_counts_estimated"] == ["published"] and answer["message_counts"]["published"] >= 4
    assert answer["message_counts"]["cancelled"] == 0


def test_changing_an_endpoints_version_changes_where_new_messages_go(api, endpoint):
    first = api.post("/api/messages/", {"endpoint": endpoint, "payload": 1, "delay_seconds": 60}, format="json")
    response = api.patch(f"/api/endpoints/{endpoint}/", {"topology": "v1"}, format="json")
    assert response.status_code == 200 and response.json()["topology"] == "v1"
    second = api.post("/api/messages/", {"endpoint": endpoint, "payload": 2, "delay_seconds": 60}, format="json")
    assert (first.json()["topology"], second.json()["topology"]) == ("v3", "v1")
    assert api.patch(f"/api/endpoints/{endpoint}/", {"topology": "v9"}, format="json").status_code == 400
    # found by the fuzzer: PostgreSQL cannot even compare a NUL, so it must be refused before any query
    assert api.patch(f"/api/endpoints/{endpoint}/", {"topology": "v\u00002"}, format="json").status_code == 400
    assert api.patch(f"/api/endpoints/{endpoint}/", {"delivery_mode": "later"}, format="json").status_code == 400
    assert api.put(f"/api/endpoints/{endpoint}/", {"topology": "v1"}, format="json").status_code == 405


def test_timeout_manager_endpoint(api, platform, endpoint_name, amqp):
    try:
        response = api.post("/api/endpoints/", {"name": endpoint_name, "delivery_mode": "timeout_manager"},
                            format="json")
        assert response.status_code == 201 and response.json()["delivery_mode"] == "timeout_manager"
        created = api.post("/api/messages/", {"endpoint": endpoint_name, "payload": 1, "delay_seconds": 5},
                           format="json")
        assert ScheduledMessage.objects.get(id=created.json()["id"]).delivery_mode == "timeout_manager"
    finally:
        amqp.delete_queue(f"default--{endpoint_name}")


def test_the_handler_moves_to_or_from_celery_queue_only_with_nothing_in_flight(api, endpoint):
    """A 400 on ``handler`` naming how many messages are in flight; the change once none is."""
    ids = [api.post("/api/messages/", {"endpoint": endpoint, "payload": {"n": i}, "delay_seconds": 600},
                    format="json").json()["id"] for i in range(2)]
    refused = api.patch(f"/api/endpoints/{endpoint}/", {"handler": "celery_queue"}, format="json")
    assert refused.status_code == 400
    assert "from none to celery_queue while 2 message(s) are in flight" in refused.json()["handler"][0]
    assert api.get(f"/api/endpoints/{endpoint}/").json()["handler"] == "none"
    for message_id in ids:
        assert api.post(f"/api/messages/{message_id}/cancel/").status_code == 200
    moved = api.patch(f"/api/endpoints/{endpoint}/", {"handler": "celery_queue"}, format="json")
    assert moved.status_code == 200 and moved.json()["handler"] == "celery_queue"
    assert Endpoint.objects.get(name=endpoint).handler == "celery_queue"
    hook = api.patch(f"/api/endpoints/{endpoint}/", {"handler": "webhook", "handler_target": "http://127.0.0.1:9/h"},
                     format="json")  # nothing in flight: back to the deliver message, its secret shown once
    assert hook.status_code == 200 and hook.json()["webhook_secret"].startswith("whsec_")
    assert secret_box.open(Endpoint.objects.get(name=endpoint).webhook_secret) == hook.json()["webhook_secret"]
    assert "webhook_secret" not in api.get(f"/api/endpoints/{endpoint}/").json()

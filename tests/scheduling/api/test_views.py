"""The REST API: authentication, permissions, validation (400 naming the field, nothing
stored), and the shapes docs/reference/api.md and docs/guides/scheduling.md document. Endpoint
creation binds a real queue."""

import json
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.config.conf import broker
from scheduling.models import AuditEvent, Endpoint, ScheduledMessage
from scheduling.security import secret_box
from tests.scheduling.messages.test_selectors import assert_no_exact_count

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
Status = ScheduledMessage.Status
MID = "00000000-0000-0000-0000-000000000000"


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", "/api/endpoints/"), ("post", "/api/endpoints/"), ("get", "/api/endpoints/x/"),
     ("get", "/api/messages/"), ("post", "/api/messages/"), ("post", "/api/messages/bulk/"),
     ("get", f"/api/messages/{MID}/"), ("post", f"/api/messages/{MID}/cancel/"),
     ("post", f"/api/messages/{MID}/republish/"), ("get", "/api/schema/"), ("get", "/api/"),
     ("get", "/api/schedules/"), ("post", "/api/schedules/"), ("get", "/api/schedules/x/"),
     ("delete", "/api/schedules/x/"), ("post", "/api/schedules/x/pause/"), ("get", "/api/schedules/preview/")],
)
def test_every_route_needs_credentials(client, method, path):
    response = getattr(client, method)(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


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


def test_permissions_are_the_role_in_the_team_and_the_key_s_scopes(api_as, team_key, platform, endpoint):
    reader = api_as("viewer")
    assert reader.get("/api/endpoints/").status_code == 200
    assert reader.post("/api/endpoints/", {"name": "x"}, format="json").status_code == 403
    assert reader.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 1},
                       format="json").status_code == 403
    nobody = api_as()  # in no team: sees nothing, may do nothing
    assert nobody.get("/api/messages/").status_code == 403
    member = api_as("member")
    created = member.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 60},
                          format="json")
    assert created.status_code == 201
    assert member.post("/api/endpoints/", {"name": "x"}, format="json").status_code == 403
    writer = team_key("default", "read", "write")  # a key may schedule but not cancel
    assert writer.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 60},
                       format="json").status_code == 201
    assert writer.post(f"/api/messages/{created.json()['id']}/cancel/").status_code == 403
    assert team_key("default", "read").post("/api/messages/", {"endpoint": endpoint, "payload": {}},
                                            format="json").status_code == 403
    assert set(ScheduledMessage.objects.values_list("status", flat=True)) == {Status.PUBLISHED}
    assert member.post(f"/api/messages/{created.json()['id']}/cancel/").status_code == 200


def test_schedule_watch_and_cancel(api, endpoint):
    created = api.post("/api/messages/", {"endpoint": endpoint, "payload": {"order": 42}, "delay_seconds": 10.25},
                       format="json")
    assert created.status_code == 201
    body = created.json()
    assert {"id", "status", "due_at", "routing_key", "topology"} <= set(body)
    assert (body["status"], body["topology"], body["requested_delay_ms"]) == ("published", "v3", 10250)
    detail = api.get(f"/api/messages/{body['id']}/").json()
    assert {"delivered_at", "lateness_ms", "delivery_count"} <= set(detail) and detail["payload"] == {"order": 42}
    assert api.post(f"/api/messages/{body['id']}/cancel/").json() == {"id": body["id"], "status": "cancelled"}
    ScheduledMessage.objects.filter(id=body["id"]).update(status=Status.DELIVERED)
    conflict = api.post(f"/api/messages/{body['id']}/cancel/")
    assert conflict.status_code == 409 and "already delivered" in conflict.json()["detail"]
    assert api.post(f"/api/messages/{uuid.uuid4()}/cancel/").status_code == 404
    assert api.get(f"/api/messages/{uuid.uuid4()}/").status_code == 404


def test_deliver_at_with_milliseconds(api, endpoint):
    body = {"endpoint": endpoint, "payload": [], "deliver_at": "2030-11-21T12:00:00.250Z"}
    response = api.post("/api/messages/", body, format="json")
    assert response.status_code == 201 and response.json()["due_at"] == "2030-11-21T12:00:00.250000Z"


@pytest.mark.parametrize(("when", "in_past"), [
    ({"deliver_at": "2020-01-01T00:00:00Z"}, True), ({"delay_seconds": 0}, False), ({"delay_seconds": 5}, False),
])
def test_a_message_asked_for_in_the_past_says_so_and_keeps_its_requested_time(api, endpoint, when, in_past):
    created = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, **when}, format="json")
    assert created.status_code == 201, created.content
    detail = api.get(f"/api/messages/{created.json()['id']}/").json()
    assert detail["scheduled_in_past"] is in_past
    if in_past:
        assert detail["due_at"] == "2020-01-01T00:00:00Z" and detail["requested_delay_ms"] == 0


def test_idempotency_key_returns_the_same_message(api, endpoint):
    body = {"endpoint": endpoint, "payload": {}, "delay_seconds": 5, "idempotency_key": "k-1"}
    first, again = (api.post("/api/messages/", body, format="json") for _ in range(2))
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"] and ScheduledMessage.objects.count() == 1


@pytest.mark.parametrize(
    ("changes", "field", "text"),
    [({"delay_seconds": -1}, "delay_seconds", "must not be negative"),
     ({"delay_seconds": 268435456}, "delay_seconds", "maximum delay of 268,435,455 s"),
     ({"delay_seconds": None}, "delay_seconds", "exactly one"),
     ({"deliver_at": "2030-01-01T00:00:00Z"}, "delay_seconds", "exactly one"),
     ({"delay_seconds": "NaN"}, "delay_seconds", "valid number"),
     ({"endpoint": "ghost"}, "endpoint", "unknown endpoint"),
     ({"endpoint": "a.b"}, "endpoint", "unknown endpoint"),
     ({"payload": "x" * 262_143}, "payload", "limit is 262,144"),
     ({"idempotency_key": "k" * 256}, "idempotency_key", "255"),
     ({"payload": None}, "payload", "null"),
     ({"payload": {"text": "nul\u0000"}}, "payload", "NUL")],
)
def test_bad_message_is_400_naming_the_field_and_stores_nothing(api, endpoint, changes, field, text):
    body = {"endpoint": endpoint, "payload": {"a": 1}, "delay_seconds": 1, **changes}
    response = api.post("/api/messages/", body, format="json")
    assert response.status_code == 400
    assert text in " ".join(response.json()[field]), response.json()
    assert not ScheduledMessage.objects.exists()


@pytest.mark.parametrize("key", ["schedule:nightly:1:1767225600000", "schedule:"])
def test_the_schedule_key_namespace_is_the_platform_s_single_and_bulk(api, endpoint, key):
    """A run of a schedule is found by its key: a caller's message under it would be taken for the run."""
    body = {"endpoint": endpoint, "payload": {"a": 1}, "delay_seconds": 1, "idempotency_key": key}
    single = api.post("/api/messages/", body, format="json")
    assert single.status_code == 400 and "platform's" in single.json()["idempotency_key"][0], single.json()
    bulk = api.post("/api/messages/bulk/", {"messages": [{**body, "idempotency_key": "fine"}, body]}, format="json")
    assert bulk.status_code == 400 and "idempotency_key" in str(bulk.json()), bulk.json()
    assert not ScheduledMessage.objects.exists()
    assert api.post("/api/messages/", {**body, "idempotency_key": "my-schedule:1"}, format="json").status_code == 201


def test_missing_payload_and_unparseable_body(api, endpoint):
    response = api.post("/api/messages/", {"endpoint": endpoint, "delay_seconds": 1}, format="json")
    assert response.status_code == 400 and "payload" in response.json()
    response = api.post("/api/messages/", "{not json", content_type="application/json")
    assert response.status_code == 400 and "JSON parse error" in response.json()["detail"]
    assert not ScheduledMessage.objects.exists()


def test_inactive_endpoint_is_refused(api, endpoint):
    Endpoint.objects.filter(name=endpoint).update(is_active=False)
    response = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 1}, format="json")
    assert response.status_code == 400 and "inactive" in response.json()["endpoint"][0]


def test_bulk_all_or_nothing(api, endpoint):
    messages = [{"endpoint": endpoint, "payload": {"i": i}, "delay_seconds": i} for i in range(3)]
    created = api.post("/api/messages/bulk/", {"messages": messages}, format="json")
    assert created.status_code == 201
    answered = created.json()["messages"]
    assert {"id", "status", "due_at", "routing_key", "topology", "endpoint"} <= set(answered[0])
    stored = {str(m.id): m.payload["i"] for m in ScheduledMessage.objects.all()}
    assert [stored[m["id"]] for m in answered] == [0, 1, 2]  # in the order given
    bad = [*messages, {"endpoint": endpoint, "payload": {}, "delay_seconds": -3}]
    response = api.post("/api/messages/bulk/", {"messages": bad}, format="json")
    assert response.status_code == 400
    assert response.json()["messages"][:3] == [{}, {}, {}]
    assert "must not be negative" in response.json()["messages"][3]["delay_seconds"][0]
    assert ScheduledMessage.objects.count() == 3


def test_bulk_limits(api, endpoint):
    one = {"endpoint": endpoint, "payload": 1, "delay_seconds": 1}
    assert api.post("/api/messages/bulk/", {"messages": [one] * 1000}, format="json").status_code == 201
    response = api.post("/api/messages/bulk/", {"messages": [one] * 1001}, format="json")
    assert response.status_code == 400 and "no more than 1000" in str(response.json()["messages"])
    response = api.post("/api/messages/bulk/", {"messages": []}, format="json")
    assert response.status_code == 400 and "messages" in response.json()
    assert ScheduledMessage.objects.count() == 1000


def test_list_filters_and_pages_by_cursor_every_message_once(api, endpoint, versions):
    """A bulk request's 60 messages share their created_at: the id orders them, and following
    next then previous gives each exactly once, newest first. No count: none is asked."""
    api.post("/api/messages/bulk/", {"messages": [{"endpoint": endpoint, "payload": i, "delay_seconds": 9}
                                                  for i in range(60)]}, format="json")
    ScheduledMessage.objects.filter(payload__in=[0, 1]).update(status=Status.CANCELLED)
    expected = [str(i) for i in ScheduledMessage.objects.order_by("-created_at", "-id").values_list("id", flat=True)]
    with CaptureQueriesContext(connection) as captured:
        page = api.get("/api/messages/", {"endpoint": endpoint}).json()
    assert_no_exact_count(captured.captured_queries)
    assert set(page) == {"next", "previous", "results"} and page["previous"] is None
    assert [m["id"] for m in page["results"]] == expected[:50] and "cursor=" in page["next"]
    last = api.get(page["next"]).json()
    assert [m["id"] for m in last["results"]] == expected[50:] and last["next"] is None
    assert [m["id"] for m in api.get(last["previous"]).json()["results"]] == expected[:50]
    assert len(api.get("/api/messages/", {"endpoint": endpoint, "status": "cancelled"}).json()["results"]) == 2
    assert api.get("/api/messages/", {"endpoint": "other"}).json() == {"next": None, "previous": None, "results": []}
    unreadable = api.get("/api/messages/", {"endpoint": endpoint, "cursor": "not-a-cursor"})
    assert unreadable.status_code == 400 and set(unreadable.json()) == {"cursor"}  # no longer the first page
    answer = api.get(f"/api/endpoints/{endpoint}/").json()
    assert answer["message_counts"] == {"pending": 0, "published": 58, "delivered": 0, "cancelled": 2, "failed": 0,
                                        "expired": 0, "superseded": 0, "waiting": 0, "skipped": 0}
    assert answer["message_counts_estimated"] == []


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


def test_schema_is_openapi_3(api):
    response = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert {"/api/messages/", "/api/messages/bulk/", "/api/messages/{id}/cancel/", "/api/endpoints/"} <= set(schema["paths"])


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


def test_bulk_limit_is_the_setting(api, endpoint, settings):
    settings.DELAY_BULK_MAX = 5
    one = {"endpoint": endpoint, "payload": 1, "delay_seconds": 1}
    response = api.post("/api/messages/bulk/", {"messages": [one] * 6}, format="json")
    assert response.status_code == 400 and "no more than 5" in str(response.json()["messages"])
    assert ScheduledMessage.objects.count() == 0
    assert api.post("/api/messages/bulk/", {"messages": [one] * 5}, format="json").status_code == 201


def test_patch_reschedules_a_message_and_says_why_not(api, api_as, endpoint):
    created = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": 60}, format="json")
    message_id = created.json()["id"]
    moved = api.patch(f"/api/messages/{message_id}/", {"deliver_at": "2030-11-21T12:00:00.250Z"}, format="json")
    assert moved.status_code == 200, moved.content
    body = moved.json()
    assert (body["id"], body["status"], body["due_at"]) == (message_id, "pending", "2030-11-21T12:00:00.250000Z")
    def instant(text):
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    assert [instant(h["due_at"]) for h in body["due_history"]] == [instant(created.json()["due_at"])]
    bad = api.patch(f"/api/messages/{message_id}/", {"delay_seconds": 1, "deliver_at": "2030-01-01T00:00:00Z"},
                    format="json")
    assert bad.status_code == 400 and "exactly one" in bad.json()["delay_seconds"][0]
    assert api.patch(f"/api/messages/{message_id}/", {"delay_seconds": "x"}, format="json").status_code == 400
    ScheduledMessage.objects.filter(id=message_id).update(status=Status.DELIVERED)
    conflict = api.patch(f"/api/messages/{message_id}/", {"delay_seconds": 5}, format="json")
    assert conflict.status_code == 409 and "already delivered" in conflict.json()["detail"]
    assert api.patch(f"/api/messages/{uuid.uuid4()}/", {"delay_seconds": 5}, format="json").status_code == 404
    reader = api_as("viewer")
    assert reader.patch(f"/api/messages/{message_id}/", {"delay_seconds": 5}, format="json").status_code == 403


def run_bulk_job(api, body: dict, capture) -> dict:
    """POST a bulk cancel or republish: it answers 202 with the job, having changed nothing yet and
    handed the job to a worker once its transaction commits; the job run here as the worker's task
    would run it (no worker in these tests); then its status URL, which says it is done."""
    from scheduling.celery.tasks import apply_bulk_action

    path = body.pop("path")
    with capture(execute=False) as callbacks:
        started = api.post(path, body, format="json")
    assert started.status_code == 202, started.content
    job = started.json()
    assert job["state"] == "running" and job["done"] == 0 and job["count"] == job["matched"]
    assert started["Location"] == job["status_url"] and job["status_url"].endswith(f"/api/bulk-actions/{job['id']}/")
    assert len(callbacks) == 1
    apply_bulk_action(job["id"])
    status = api.get(job["status_url"])
    assert status.status_code == 200 and status.json()["state"] == "done"
    return status.json()


def test_a_bulk_dry_run_counts_no_further_than_its_cap(api, endpoint, monkeypatch):
    monkeypatch.setattr("scheduling.api.views.DRY_RUN_COUNT_CAP", 2)
    for delay in (30, 60, 90):
        api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": delay}, format="json")
    dry = api.post("/api/messages/cancel/", {"endpoint": endpoint, "dry_run": True}, format="json")
    assert dry.status_code == 200 and dry.json() == {"count": 2, "exact": False}  # more than 2
    monkeypatch.setattr("scheduling.api.views.DRY_RUN_COUNT_CAP", 3)
    assert api.post("/api/messages/cancel/", {"endpoint": endpoint, "dry_run": True}, format="json").json() == \
        {"count": 3, "exact": True}


def test_bulk_cancel_and_republish_by_filter_run_as_a_job(api, api_as, endpoint, django_capture_on_commit_callbacks):
    ids = [api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, "delay_seconds": d}, format="json")
           .json()["id"] for d in (30, 60, 7200)]
    soon = {"endpoint": endpoint, "due_before": (datetime.now(dt_timezone.utc) + timedelta(minutes=5)).isoformat()}
    dry = api.post("/api/messages/cancel/", {**soon, "dry_run": True}, format="json")
    assert dry.status_code == 200 and dry.json() == {"count": 2, "exact": True}
    assert set(ScheduledMessage.objects.values_list("status", flat=True)) == {Status.PUBLISHED}
    done = run_bulk_job(api, {"path": "/api/messages/cancel/", **soon}, django_capture_on_commit_callbacks)
    assert (done["kind"], done["count"], done["done"]) == ("cancel", 2, 2)
    assert dict(ScheduledMessage.objects.values_list("id", "status")) == {
        uuid.UUID(ids[0]): Status.CANCELLED, uuid.UUID(ids[1]): Status.CANCELLED, uuid.UUID(ids[2]): Status.PUBLISHED}
    ScheduledMessage.objects.filter(id=ids[2]).update(status=Status.FAILED)
    done = run_bulk_job(api, {"path": "/api/messages/republish/", "endpoint": endpoint},
                        django_capture_on_commit_callbacks)
    assert (done["kind"], done["done"]) == ("republish", 1)
    assert ScheduledMessage.objects.get(id=ids[2]).status == Status.PENDING
    bad = api.post("/api/messages/cancel/", {"dry_run": True}, format="json")
    assert bad.status_code == 400 and "at least one filter" in bad.json()["non_field_errors"][0]
    assert api.post("/api/messages/cancel/", {"due_before": "soon"}, format="json").status_code == 400
    viewer = api_as("viewer")
    assert viewer.post("/api/messages/cancel/", soon, format="json").status_code == 403


@pytest.mark.parametrize("job_id", ["999999", "not-a-number", "9" * 40, "00000000-0000-0000-0000-000000000000"])
def test_an_unknown_bulk_job_is_a_404(api, job_id):
    assert api.get(f"/api/bulk-actions/{job_id}/").status_code == 404


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

"""The holes an audit of the API found, each closed (every test here failed on the code before
teams): raw Celery messages through the API, endpoint names that are someone else's queue, keys
kept in clear and never expiring, changes nobody recorded, and nothing bounding a team. The JSON
depth scan and malformed cursors are tests/scheduling/api/test_parsers.py and test_pagination.py."""

import uuid

import pytest
from django.urls import reverse

from scheduling.config.conf import broker
from scheduling.messages import wire
from scheduling.models import AuditEvent, Endpoint, Schedule, ScheduledMessage

pytestmark = [pytest.mark.django_db, pytest.mark.broker]

RAW_TASK = {"celery": {"task": "scheduling.relay.sweep", "queue": "celery", "content_type": "application/x-python-serialize",
                       "content_encoding": "binary", "body": "gASVAgAAAAAAAAB9lC4=",
                       "headers": {"task": "scheduling.relay.sweep", "id": "x", "CC": ["dp.relay"]},
                       "properties": {}}}


@pytest.fixture
def tasks_endpoint(api, platform, amqp):
    """A celery_queue endpoint made through the API (its queue: the team's, not Celery's)."""
    name = f"tasks-{uuid.uuid4().hex[:6]}"
    response = api.post("/api/endpoints/", {"name": name, "handler": "celery_queue"}, format="json")
    assert response.status_code == 201, response.content
    yield name
    amqp.delete_queue(Endpoint.objects.get(name=name).queue)


def test_a_raw_celery_message_is_refused_and_nothing_is_stored(api, tasks_endpoint):
    response = api.post("/api/messages/", {"endpoint": tasks_endpoint, "payload": RAW_TASK, "delay_seconds": 5},
                        format="json")
    assert response.status_code == 400 and "raw Celery task message" in response.json()["payload"][0]
    assert not ScheduledMessage.objects.exists()


@pytest.mark.parametrize(("payload", "says"), [
    ({"task": "scheduling.relay.sweep"}, "the platform's or Celery's own"),
    ({"task": "celery.backend_cleanup"}, "the platform's or Celery's own"),
    ({"task": "billing.tasks.charge"}, "matches none of DELAY_CELERY_TASK_ALLOWLIST"),
    ({"task": "testapp.plain_receipt", "headers": {"CC": ["dp.relay"]}}, "raw Celery task message"),
    ({"task": "testapp.plain_receipt", "exchange": "amq.topic"}, "unknown task field(s) exchange"),
    ({"task": "testapp.plain_receipt", "content_type": "application/x-python-serialize"}, "unknown task field"),
    ({"task": "testapp.plain_receipt", "args": "42"}, "args must be a list"),
    ({"task": "testapp.plain_receipt", "priority": 256}, "priority must be"),
    ({"task": "testapp.plain_receipt", "queue": "dp.relay"}, "queue must be this endpoint's queue"),
    ({"task": "os.system; rm"}, "task must be a task's name"),
])
def test_a_task_outside_the_allowlist_or_with_options_the_platform_does_not_offer_is_refused(api, tasks_endpoint,
                                                                                             payload, says):
    response = api.post("/api/messages/", {"endpoint": tasks_endpoint, "payload": payload, "delay_seconds": 5},
                        format="json")
    assert response.status_code == 400 and says in response.json()["payload"][0], response.json()
    assert not ScheduledMessage.objects.exists()


def test_an_allowed_task_is_built_by_the_platform_as_json_protocol_2_with_fixed_headers(api, tasks_endpoint):
    response = api.post("/api/messages/", {"endpoint": tasks_endpoint, "delay_seconds": 5, "payload": {
        "task": "testapp.plain_receipt", "args": [42], "kwargs": {"x": "é"}, "id": "my-task-1", "priority": 3}},
        format="json")
    assert response.status_code == 201, response.content
    row = ScheduledMessage.objects.select_related("endpoint", "topology").get()
    out, _ = wire.outgoing(row, row.topology.cascade, row.created_at, margin_ms=0)
    assert out.properties["content_type"] == "application/json" and out.properties["priority"] == 3
    assert out.headers["task"] == "testapp.plain_receipt" and out.headers["id"] == "my-task-1"
    assert set(out.headers) - {"CC"} <= {*wire.structured.task_headers(row.payload, "x"), wire.H_MESSAGE_ID,
                                         wire.H_DUE_AT_MS, wire.H_VERSION, wire.H_DELAY_MS, wire.H_PUBLISHED_AT_MS}
    assert out.body == b'[[42],{"x":"\xc3\xa9"},{"callbacks":null,"errbacks":null,"chain":null,"chord":null}]'
    assert out.routing_key == row.endpoint.queue != "celery"


def test_sending_tasks_needs_the_tasks_scope(team_key, tasks_endpoint):
    without = team_key("default", "read", "write")
    response = without.post("/api/messages/", {"endpoint": tasks_endpoint, "payload": {"task": "testapp.plain_receipt"},
                                               "delay_seconds": 5}, format="json")
    assert response.status_code == 403 and "tasks scope" in response.json()["detail"]
    assert not ScheduledMessage.objects.exists()


@pytest.mark.parametrize(("name", "status"), [("dp.relay", 400), ("amq.direct.x", 400), ("dp.v3.delay-delivery", 400)])
def test_an_endpoint_named_as_a_platform_or_broker_queue_is_a_400(api, platform, name, status):
    response = api.post("/api/endpoints/", {"name": name, "handler": "none"}, format="json")
    assert response.status_code == status and "name" in response.json(), response.content
    assert not Endpoint.objects.exists()


def test_an_endpoint_called_celery_gets_its_team_s_queue_not_celery_s(api, platform, amqp):
    response = api.post("/api/endpoints/", {"name": "celery", "handler": "none"}, format="json")
    try:
        assert response.status_code == 201 and response.json()["queue"] == "default--celery"
        queues = {q["name"] for q in broker().management.queues(broker().vhost)}
        assert "default--celery" in queues
    finally:
        amqp.delete_queue("default--celery")


@pytest.mark.parametrize(("queue", "handler", "says"), [
    ("dp.relay", "none", "the broker's or the platform's own"),
    ("celery", "none", "a Celery task queue"),
    ("amq.gen-1", "celery_queue", "the broker's or the platform's own"),
    ("other--billing", "none", "form of a team's queue"),
])
def test_an_operator_s_exact_queue_is_never_one_the_platform_the_broker_or_a_team_owns(api, platform, queue, handler,
                                                                                     says):
    response = api.post("/api/endpoints/", {"name": "interop", "queue": queue, "handler": handler}, format="json")
    assert response.status_code == 400 and says in response.json()["queue"][0], response.content
    assert not Endpoint.objects.exists()


def test_only_an_operator_binds_an_exact_queue(api, api_as, platform, amqp):
    admin = api_as("admin")
    refused = admin.post("/api/endpoints/", {"name": "interop", "queue": "Billing.Endpoint"}, format="json")
    assert refused.status_code == 400 and "only platform operators" in refused.json()["queue"][0]
    made = api.post("/api/endpoints/", {"name": "interop", "queue": "Billing.Endpoint"}, format="json")
    try:
        assert made.status_code == 201 and made.json()["queue"] == "Billing.Endpoint"
    finally:
        amqp.delete_queue("Billing.Endpoint")


def test_no_value_the_database_holds_authenticates_and_keys_expire(api, admin_user):
    from django.db import connection

    key = api.key.key
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM scheduling_apikey")
        stored = [str(value) for row in cursor.fetchall() for value in row]
    assert stored and not any(key in value or value in key and len(value) > 12 for value in stored)
    assert api.get("/api/endpoints/").status_code == 200
    plain = api.__class__()
    plain.credentials(HTTP_AUTHORIZATION=f"Token {key}")  # only keys migrated from DRF's tokens answer to Token
    assert plain.get("/api/endpoints/").status_code == 401
    assert api.key.row.expires_at is not None


def test_the_admin_lists_no_live_key(admin_client):
    assert admin_client.get("/admin/authtoken/").status_code == 404
    page = admin_client.get(reverse("admin:scheduling_apikey_changelist")).content.decode()
    assert "digest" not in page


def test_every_change_is_audited_with_who_where_and_before_and_after(api, platform, amqp):
    made = api.post("/api/endpoints/", {"name": "hooks", "handler": "webhook",
                                        "handler_target": "http://127.0.0.1:9/h"}, format="json",
                    HTTP_USER_AGENT="curl/8", HTTP_X_REQUEST_ID="req-1")
    try:
        secret = made.json()["webhook_secret"]
        message = api.post("/api/messages/", {"endpoint": "hooks", "payload": {}, "delay_seconds": 60},
                           format="json").json()
        api.post(f"/api/messages/{message['id']}/cancel/")
        api.post("/api/endpoints/hooks/rotate-secret/", {}, format="json")
        api.patch("/api/endpoints/hooks/", {"max_deliveries_per_second": 7}, format="json")
        api.post("/api/messages/cancel/", {"created_after": "1970-01-01T00:00:00Z"}, format="json")
    finally:
        amqp.delete_queue("default--hooks")
    rows = list(AuditEvent.objects.order_by("id"))
    assert [r.action for r in rows] == ["endpoint.create", "message.schedule", "message.cancel",
                                        "endpoint.rotate_secret", "endpoint.update", "message.bulk_cancel"]
    first = rows[0]
    assert (first.source, first.actor, first.team_name, first.ip, first.user_agent, first.request_id) == \
        ("api", "admin (key " + api.key.row.prefix + ")", "default", "127.0.0.1", "curl/8", "req-1")
    assert first.after["webhook_secret"] == "<redacted>" and first.after["name"] == "hooks"
    assert rows[2].before == {"status": "published"} and rows[2].after == {"status": "cancelled"}
    assert rows[4].before == {"max_deliveries_per_second": None} and rows[4].after == {"max_deliveries_per_second": 7}
    assert rows[5].extra["filters"] == {"created_after": "1970-01-01T00:00:00+00:00"} and rows[5].extra["matched"] == 0
    assert not any(secret in str([r.before, r.after, r.extra]) for r in rows)


def test_a_team_cannot_flood_the_platform_with_schedules(api, platform, amqp, settings):
    from scheduling.models import Team

    settings.DELAY_TEAM_MIN_SCHEDULE_INTERVAL_SECONDS = 60
    settings.DELAY_TEAM_MAX_SCHEDULES = 3
    assert api.post("/api/endpoints/", {"name": "reports"}, format="json").status_code == 201
    try:
        body = {"endpoint": "reports", "payload": {"blob": "x" * 1000}, "interval_seconds": 1}
        fast = api.post("/api/schedules/", {**body, "key": "s0"}, format="json")
        assert fast.status_code == 400 and "shortest interval" in fast.json()["interval_seconds"][0]
        every_minute = api.post("/api/schedules/", {**body, "key": "cron", "interval_seconds": None,
                                                     "cron": "* * * * *"}, format="json")
        assert every_minute.status_code == 201  # a cron rule runs once a minute at most: within 60 s
        Team.objects.filter(name="default").update(min_schedule_interval_seconds=120)
        tighter = api.post("/api/schedules/", {**body, "key": "cron2", "interval_seconds": None,
                                               "cron": "* * * * *"}, format="json")
        assert tighter.status_code == 400 and "below the shortest interval" in tighter.json()["cron"][0]
        for n in (1, 2):
            assert api.post("/api/schedules/", {**body, "key": f"s{n}", "interval_seconds": 300},
                            format="json").status_code == 201
        over = api.post("/api/schedules/", {**body, "key": "s3", "interval_seconds": 300}, format="json")
        assert over.status_code == 403 and "quota of 3" in over.json()["detail"]
        assert Schedule.objects.count() == 3
        updated = api.post("/api/schedules/", {**body, "key": "s1", "interval_seconds": 600}, format="json")
        assert updated.status_code == 200  # a change of one it has is no new schedule
    finally:
        amqp.delete_queue("default--reports")

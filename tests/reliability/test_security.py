"""Security by default: authentication on every route (derived from the schema, so a new route
is covered automatically), secure settings, staff-only admin, secrets kept out of responses,
pages and logs."""

import logging
import os
import subprocess
import sys

import pytest
from drf_spectacular.generators import SchemaGenerator

from scheduling.models import Endpoint, ScheduledMessage
from scheduling.services.delivery import delivery_receive
from tests.support import ROOT, RecordingServer

pytestmark = pytest.mark.reliability
SECRET = "a-very-distinctive-signing-secret-123"


def schema_routes():
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    return [(method, path.replace("{id}", "00000000-0000-0000-0000-000000000000").replace("{name}", "x"))
            for path, operations in paths.items() for method in operations]


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), schema_routes())
def test_every_api_route_in_the_schema_needs_credentials(client, method, path):
    response = getattr(client, method)(path, content_type="application/json")
    assert response.status_code == 401


@pytest.mark.django_db
def test_a_token_without_scheduling_permissions_can_do_nothing(api_as):
    nobody = api_as()
    assert nobody.post("/api/endpoints/", {"name": "x"}, format="json").status_code == 403
    assert nobody.post("/api/messages/", {"endpoint": "x", "payload": 1, "delay_seconds": 1},
                       format="json").status_code == 403
    assert nobody.get("/api/messages/").status_code == 403 and not Endpoint.objects.exists()


def _settings_in_subprocess(env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE")}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)"],
        cwd=ROOT, env={**clean, "DJANGO_SETTINGS_MODULE": "delayplatform.settings", "ENV_FILE": os.devnull, **env},
        capture_output=True, text=True, timeout=60,
    )


def test_missing_secret_key_stops_start_up_outside_development():
    result = _settings_in_subprocess({})
    assert result.returncode != 0 and "SECRET_KEY is not set" in result.stderr


def test_debug_is_off_unless_asked_for():
    assert _settings_in_subprocess({"SECRET_KEY": "k"}).stdout.strip() == "False"
    assert _settings_in_subprocess({"DEBUG": "1"}).stdout.strip() == "True"


@pytest.mark.django_db
def test_admin_is_for_staff_only(client, django_user_model):
    user = django_user_model.objects.create_user("plain", password="pw")
    client.force_login(user)
    response = client.get("/admin/scheduling/scheduledmessage/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


@pytest.mark.django_db
def test_webhook_secret_never_leaves_the_database(admin_client, api, versions, caplog, settings):
    settings.DELAY_HANDLER_MAX_RETRIES = 0
    caplog.set_level(logging.DEBUG)
    with RecordingServer(fail_first=1) as server:
        endpoint = Endpoint.objects.create(name="signed", topology=versions["v2"], handler="webhook",
                                           handler_target=server.url, webhook_secret=SECRET)
        from django.utils import timezone

        message = ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v2"], payload={"a": 1},
                                                  due_at=timezone.now(), requested_delay_ms=0, status="published")
        delivery_receive(message_id=str(message.id))  # the webhook fails: errors get logged
    message.refresh_from_db()
    assert message.status == "failed" and "webhook answered 500" in message.last_error
    seen = [caplog.text, message.last_error,
            api.get("/api/endpoints/signed/").content.decode(), api.get("/api/endpoints/").content.decode(),
            api.get(f"/api/messages/{message.id}/").content.decode(),
            admin_client.get(f"/admin/scheduling/endpoint/{endpoint.pk}/change/").content.decode()]
    assert all(SECRET not in text for text in seen)
    assert server.requests[0]["headers"]["X-Delay-Signature"].startswith("sha256=")  # it was used, not shown

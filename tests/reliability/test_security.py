"""Security by default: authentication on every route (derived from the schema, so a new route
is covered automatically), secure settings, staff-only admin, secrets kept out of responses,
pages and logs."""

import logging
import os
import subprocess
import sys

import pytest
from drf_spectacular.generators import SchemaGenerator

from harness.paths import ROOT
from harness.recording_server import RecordingServer
from scheduling.delivery.services import delivery_receive
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.security import secret_box

SECRET = "a-very-distinctive-signing-secret-123"


def path_value(parameter: dict) -> str:
    """A value the route's own pattern takes (so the request reaches the view, whose answer is the
    401), from the parameter's schema: a UUID, digits, a key's prefix, or a name."""
    schema = parameter["schema"]
    if schema.get("format") == "uuid":
        return "00000000-0000-0000-0000-000000000000"
    if schema.get("type") == "integer" or schema.get("pattern", "").startswith("^[0-9]"):
        return "1"
    return "dpk_abcdefgh" if parameter["name"] == "prefix" else "x"


def schema_routes():
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    routes = []
    for path, operations in paths.items():
        for method, operation in operations.items():
            filled = path
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path":
                    filled = filled.replace("{" + parameter["name"] + "}", path_value(parameter))
            assert "{" not in filled, f"{method} {path}: a path parameter the schema does not describe"
            routes.append((method, filled))
    return routes


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
        endpoint = Endpoint.objects.create(name="signed", queue="signed", topology=versions["v2"], handler="webhook",
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


# --- production settings: Django's own deployment check is clean under DELAY_PRODUCTION=1 -------

STRONG_KEY = "k3Q9-vX2m" * 8  # 72 characters, varied: what check --deploy asks of a key
SECRETS_KEYS = "kvLb6zKSU6yG-09VLHaerRcuMZOY3pMFPvMYpGkMcxQ="  # a Fernet key: required in production too
METRICS_TOKEN = "m3tr1cs-t0ken-of-this-test"  # required in production too


def _check_deploy(env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE") and not k.startswith("DELAY_")}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env={**clean, "DJANGO_SETTINGS_MODULE": "delayplatform.settings", "ENV_FILE": os.devnull, **env},
        capture_output=True, text=True, timeout=120,
    )


def test_check_deploy_is_clean_with_the_production_switch():
    result = _check_deploy({"SECRET_KEY": STRONG_KEY, "DELAY_PRODUCTION": "1", "DELAY_SECRETS_KEYS": SECRETS_KEYS,
                            "DELAY_METRICS_TOKEN": METRICS_TOKEN})
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout and "WARNING" not in result.stderr + result.stdout


def test_check_deploy_warns_without_it():
    result = _check_deploy({"SECRET_KEY": STRONG_KEY})
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):  # HSTS, redirect, cookies
        assert warning in result.stderr


def test_check_deploy_is_clean_behind_a_tls_proxy_too():
    result = _check_deploy({"SECRET_KEY": STRONG_KEY, "DELAY_PRODUCTION": "1", "DELAY_SECRETS_KEYS": SECRETS_KEYS,
                            "DELAY_METRICS_TOKEN": METRICS_TOKEN, "DELAY_TLS_PROXY_HEADER": "X-Forwarded-Proto"})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("env", "error"), [
    ({"SECRET_KEY": "short", "DELAY_PRODUCTION": "1"}, "SECRET_KEY must be at least 50 random characters"),
    ({"SECRET_KEY": STRONG_KEY, "DELAY_PRODUCTION": "1", "DEBUG": "1"}, "DELAY_PRODUCTION=1 and DEBUG=1"),
    ({"SECRET_KEY": STRONG_KEY, "DELAY_PRODUCTION": "1", "DELAY_SECRETS_KEYS": ""},
     "DELAY_SECRETS_KEYS must be set with DELAY_PRODUCTION=1"),
    ({"SECRET_KEY": STRONG_KEY, "DELAY_PRODUCTION": "1", "DELAY_SECRETS_KEYS": SECRETS_KEYS},
     "DELAY_METRICS_TOKEN must be set with DELAY_PRODUCTION=1"),
    ({"SECRET_KEY": STRONG_KEY, "DELAY_SECRETS_KEYS": "hunter2"}, "DELAY_SECRETS_KEYS: key 1 of 1 is not a Fernet key"),
    ({"SECRET_KEY": STRONG_KEY, "DELAY_TLS_PROXY_HEADER": "X-Forwarded-Proto: https"}, "must be a header name"),
    ({"SECRET_KEY": STRONG_KEY, "DELAY_API_RATE": "lots"}, "DELAY_API_RATE must be like 6000/minute"),
    ({"SECRET_KEY": STRONG_KEY, "DELAY_LOGIN_FAILURE_LIMIT": "0"},
     "DELAY_LOGIN_FAILURE_LIMIT must be at least 1, not 0"),
    ({"SECRET_KEY": STRONG_KEY, "DELAY_MAX_JSON_DEPTH": "2"}, "DELAY_MAX_JSON_DEPTH must be at least 4"),
])
def test_bad_security_settings_stop_start_up_with_one_line(env, error):
    result = _settings_in_subprocess(env)
    assert result.returncode != 0 and error in result.stderr.strip().splitlines()[-1], result.stderr[-500:]


@pytest.mark.django_db
def test_production_redirects_to_https_but_not_the_probes(settings, client):
    settings.SECURE_SSL_REDIRECT = True  # what DELAY_PRODUCTION=1 sets; the exemptions are always there
    assert client.get("/admin/login/").status_code == 301
    for path in ("/healthz", "/readyz", "/metrics"):
        assert client.get(path).status_code != 301, path  # answered (or 404 until the URL exists), never redirected
    assert client.get("/admin/login/", secure=True).status_code == 200


# --- failed admin logins are limited (django-axes) ----------------------------------------------


@pytest.mark.django_db
def test_repeated_failed_logins_lock_the_user_out_and_others_stay_in(client, django_user_model, settings):
    settings.AXES_FAILURE_LIMIT = 3
    django_user_model.objects.create_superuser("boss", "b@example.com", "right-pw")
    django_user_model.objects.create_superuser("other", "o@example.com", "other-pw")
    login = "/admin/login/?next=/admin/"
    for _ in range(2):
        assert client.post(login, {"username": "boss", "password": "wrong"}).status_code == 200  # the form again
    locked = client.post(login, {"username": "boss", "password": "wrong"})
    assert locked.status_code == 429 and b"too many login attempts. Please try again later" in locked.content
    refused = client.post(login, {"username": "boss", "password": "right-pw"})
    assert refused.status_code == 429  # the right password is refused too while locked
    assert "_auth_user_id" not in client.session
    assert client.post(login, {"username": "other", "password": "other-pw"}).status_code == 302  # not affected


@pytest.mark.django_db
def test_a_successful_login_resets_the_count(client, django_user_model, settings):
    settings.AXES_FAILURE_LIMIT = 3
    django_user_model.objects.create_superuser("boss", "b@example.com", "right-pw")
    login = "/admin/login/?next=/admin/"
    for _ in range(2):
        client.post(login, {"username": "boss", "password": "wrong"})
    assert client.post(login, {"username": "boss", "password": "right-pw"}).status_code == 302
    client.logout()
    for _ in range(2):
        assert client.post(login, {"username": "boss", "password": "wrong"}).status_code == 200
    assert client.post(login, {"username": "boss", "password": "right-pw"}).status_code == 302


@pytest.mark.django_db
def test_the_api_still_authenticates_with_a_token_and_a_session(api, admin_user, client):
    assert api.get("/api/endpoints/").status_code == 200
    client.force_login(admin_user)
    assert client.get("/api/endpoints/").status_code == 200


@pytest.mark.django_db
def test_a_rotated_secret_is_answered_once_and_never_logged(api, versions, caplog):
    caplog.set_level(logging.DEBUG)
    Endpoint.objects.create(name="rotating", queue="rotating", topology=versions["v2"], handler="webhook",
                            handler_target="https://example.com/hook", webhook_secret=SECRET)
    response = api.post("/api/endpoints/rotating/rotate-secret/", {}, format="json")
    assert response.status_code == 200
    new = response.json()["webhook_secret"]
    assert new == secret_box.open(Endpoint.objects.get(name="rotating").webhook_secret)
    seen = [caplog.text, api.get("/api/endpoints/rotating/").content.decode(), api.get("/api/endpoints/").content.decode()]
    assert all(new not in text and SECRET not in text for text in seen)

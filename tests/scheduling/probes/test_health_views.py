"""/healthz and /readyz through the whole middleware stack, against the real database and broker
(scheduling/probes/health.py has the parts; test_health.py their failures)."""

import pytest


def test_healthz_answers_without_database_or_broker(client, settings):
    """No django_db mark: pytest-django fails any query, so a 200 proves none was made."""
    settings.BROKER_URL = "amqp://guest:guest@127.0.0.1:1//"  # nothing listens there
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.parametrize("path", ["/healthz", "/healthz/"])
def test_probes_answer_any_host_over_plain_http(client, settings, path):
    """A Kubernetes probe sends the pod's IP as Host: not in ALLOWED_HOSTS, and no HTTPS redirect."""
    settings.SECURE_SSL_REDIRECT = True
    response = client.get(path, HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200
    assert client.get("/admin/login/", HTTP_HOST="10.1.2.3:8000").status_code == 400  # the rest still checks


def test_probes_refuse_writes(client):
    assert client.post("/healthz").status_code == 405


@pytest.mark.django_db(transaction=True)
def test_readyz_ok_on_the_test_platform(client, platform):
    response = client.get("/readyz", HTTP_HOST="10.1.2.3")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "broker": "ok", "cascade": "ok"}}


@pytest.mark.django_db(transaction=True)
def test_readyz_names_the_broker_and_shows_no_url(client, platform, settings):
    settings.BROKER_URL = f"{settings.BROKER_URL.rsplit('/', 1)[0]}/dp-test-no-such-vhost"  # the real broker
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert set(body["failed"]) == {"broker"}
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["cascade"] == "not checked (needs the broker)"
    assert not any(word in response.content.decode() for word in ("amqp", "guest", "127.0.0.1", "no-such-vhost"))

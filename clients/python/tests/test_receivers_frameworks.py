"""The Django, Flask and FastAPI helpers, each through its framework's own test client."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from math import floor

import pytest
import standardwebhooks

from delayclient.receivers import Receiver, verify

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"o" * 32).decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"x" * 32).decode()
MSG_ID = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


def signed(payload=None, *, secrets=(SECRET,), msg_id=MSG_ID):
    """(body, headers) as the platform sends them (as in test_receivers)."""
    body = json.dumps({"order": 42, "note": "café ✓"} if payload is None else payload,
                      separators=(",", ":"), ensure_ascii=False)
    at = datetime.now(timezone.utc)
    signature = " ".join(standardwebhooks.Webhook(s).sign(msg_id, at, body) for s in secrets)
    timestamp = str(floor(at.timestamp()))
    headers = {"webhook-id": msg_id, "webhook-timestamp": timestamp, "webhook-signature": signature}
    return body.encode(), headers


def test_header_mappings_of_each_framework():
    """Starlette's, Werkzeug's and Django's headers as the helpers pass them; a header repeated
    with two values is refused, not resolved by whichever comes last."""
    body, headers = signed()
    datastructures = pytest.importorskip("starlette.datastructures")
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    assert verify(body, datastructures.Headers(raw=raw), SECRET).id == MSG_ID
    doubled = datastructures.Headers(raw=raw + [(b"webhook-id", b"other")])
    with pytest.raises(Exception, match="given twice"):
        verify(body, doubled, SECRET)
    werkzeug = pytest.importorskip("werkzeug.datastructures")
    assert verify(body, werkzeug.Headers(headers), SECRET).id == MSG_ID
    django_request = pytest.importorskip("django.http.request")
    meta = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()}
    assert verify(body, django_request.HttpHeaders(meta), SECRET).id == MSG_ID


# --- Django ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def django_rf():
    pytest.importorskip("django")
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(SECRET_KEY="test", ALLOWED_HOSTS=["*"], DEBUG=False, USE_TZ=True,
                           DEFAULT_CHARSET="utf-8", INSTALLED_APPS=[], MIDDLEWARE=[])
        django.setup()
    from django.test import RequestFactory

    return RequestFactory()


def django_post(rf, view, body, headers, **kwargs):
    return view(rf.post("/hook", data=body, content_type="application/json", headers=headers), **kwargs)


def test_django_view(django_rf):
    from django.http import JsonResponse

    from delayclient.receivers.django import webhook_view

    calls = []

    @webhook_view(secret=lambda: SECRET)  # read at request time
    def hook(request, webhook, name):
        calls.append((name, webhook.payload))
        if webhook.payload.get("answer"):
            return JsonResponse({"ok": True})

    assert hook.csrf_exempt
    body, headers = signed()
    response = django_post(django_rf, hook, body, headers, name="orders")
    assert response.status_code == 204
    assert calls == [("orders", {"order": 42, "note": "café ✓"})]

    response = django_post(django_rf, hook, body, headers, name="orders")  # a redelivery
    assert (response.status_code, json.loads(response.content)) == (200, {"duplicate": True})
    assert len(calls) == 1

    response = django_post(django_rf, hook, *signed({"answer": 1}, msg_id="b"), name="x")
    assert (response.status_code, json.loads(response.content)) == (200, {"ok": True})

    tampered = body.replace(b"42", b"43")
    response = django_post(django_rf, hook, tampered, {**headers, "webhook-id": "c"}, name="x")
    assert response.status_code == 400
    assert "no signature matches" in json.loads(response.content)["error"]

    response = hook(django_rf.get("/hook"), name="x")
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert len(calls) == 2


def test_django_failed_handling_is_retried(django_rf):
    from django.http import HttpResponse

    from delayclient.receivers.django import webhook_view

    outcomes = [RuntimeError("database down"), HttpResponse(status=503), None]

    @webhook_view(secret=SECRET, previous_secret=OLD_SECRET)
    def hook(request, webhook):
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    body, headers = signed(secrets=(OLD_SECRET,))
    with pytest.raises(RuntimeError):
        django_post(django_rf, hook, body, headers)
    assert django_post(django_rf, hook, body, headers).status_code == 503
    assert django_post(django_rf, hook, body, headers).status_code == 204
    assert django_post(django_rf, hook, body, headers).status_code == 200  # now a duplicate
    assert outcomes == []


def test_django_body_over_the_bound(django_rf):
    from delayclient.receivers.django import webhook_view

    receiver = Receiver(SECRET)
    receiver.max_body = 100

    @webhook_view(receiver=receiver)
    def hook(request, webhook):
        raise AssertionError("not called")

    response = django_post(django_rf, hook, *signed({"blob": "a" * 200}))
    assert response.status_code == 400 and "body over 100 bytes" in json.loads(response.content)["error"]


def test_helpers_want_a_secret_or_a_receiver():
    pytest.importorskip("django")
    from delayclient.receivers.django import webhook_view

    with pytest.raises(TypeError):
        webhook_view()
    with pytest.raises(TypeError):
        webhook_view(secret=SECRET, receiver=Receiver(SECRET))


# --- Flask ----------------------------------------------------------------------------------


def test_flask_view():
    flask = pytest.importorskip("flask")
    from delayclient.receivers.flask import webhook_view

    app = flask.Flask(__name__)
    calls = []

    @app.route("/hooks/<name>", methods=["GET", "POST"])
    @webhook_view(secret=SECRET)
    def hook(webhook, name):
        calls.append((name, webhook.id))
        if webhook.payload.get("fail"):
            raise RuntimeError("failed")
        if webhook.payload.get("answer"):
            return {"ok": True}

    client = app.test_client()
    body, headers = signed()
    response = client.post("/hooks/orders", data=body, headers=headers)
    assert response.status_code == 204 and calls == [("orders", MSG_ID)]

    response = client.post("/hooks/orders", data=body, headers=headers)
    assert (response.status_code, response.get_json()) == (200, {"duplicate": True})
    assert len(calls) == 1

    assert client.post("/hooks/x", data=b"{}", headers={**headers, "webhook-id": "b"}).status_code == 400
    response = client.post("/hooks/x", data=body, headers={**headers, "webhook-signature": "v1,AAAA"})
    assert response.status_code == 400 and "no signature matches" in response.get_json()["error"]

    response = client.post("/hooks/x", data=b"x" * 2_000_000, headers=headers)
    assert response.status_code == 400 and "body over" in response.get_json()["error"]

    response = client.get("/hooks/x")
    assert response.status_code == 405 and response.headers["Allow"] == "POST"

    assert client.post("/hooks/x", data=b"", headers=dict(zip(headers, ["", "", ""]))).status_code == 400

    answer_body, answer_headers = signed({"answer": 1}, msg_id="c")
    response = client.post("/hooks/x", data=answer_body, headers=answer_headers)
    assert (response.status_code, response.get_json()) == (200, {"ok": True})

    app.testing = False  # an exception answers 500, as in production
    fail_body, fail_headers = signed({"fail": 1}, msg_id="d")
    assert client.post("/hooks/x", data=fail_body, headers=fail_headers).status_code == 500
    # handled again, not answered as a duplicate
    assert client.post("/hooks/x", data=fail_body, headers=fail_headers).status_code == 500
    assert [c for c in calls if c[1] == "d"] == [("x", "d"), ("x", "d")]


# --- FastAPI --------------------------------------------------------------------------------


def test_fastapi_dependency():
    fastapi = pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from delayclient.receivers import Webhook
    from delayclient.receivers.fastapi import DuplicateWebhook, VerifiedWebhook

    app = fastapi.FastAPI()
    verified = VerifiedWebhook(secret=lambda: SECRET, previous_secret=OLD_SECRET)
    calls = []

    @app.post("/hooks/orders", status_code=204)
    async def hook(webhook: Webhook = fastapi.Depends(verified)):  # noqa: B008 (FastAPI's way)
        calls.append(webhook.id)
        if webhook.payload.get("fail"):
            raise RuntimeError("failed")
        verified.done(webhook)

    client = TestClient(app, raise_server_exceptions=False)
    body, headers = signed()
    assert client.post("/hooks/orders", content=body, headers=headers).status_code == 204
    assert calls == [MSG_ID]

    response = client.post("/hooks/orders", content=body, headers=headers)
    assert (response.status_code, response.json()) == (200, {"detail": {"duplicate": True}})
    assert calls == [MSG_ID]
    assert DuplicateWebhook("x").status_code == 200

    old_body, old_headers = signed(secrets=(OLD_SECRET,), msg_id="b")  # the previous secret
    assert client.post("/hooks/orders", content=old_body, headers=old_headers).status_code == 204

    response = client.post("/hooks/orders", content=body, headers={**headers, "webhook-timestamp": "1"})
    assert response.status_code == 400 and "old" in response.json()["detail"]
    other_body, other_headers = signed(secrets=(OTHER_SECRET,), msg_id="c")
    response = client.post("/hooks/orders", content=other_body, headers=other_headers)
    assert response.status_code == 400 and "no signature matches" in response.json()["detail"]
    response = client.post("/hooks/orders", content=b"x" * 2_000_000, headers=headers)
    assert response.status_code == 400 and "body over" in response.json()["detail"]

    fail_body, fail_headers = signed({"fail": 1}, msg_id="d")
    assert client.post("/hooks/orders", content=fail_body, headers=fail_headers).status_code == 500
    assert client.post("/hooks/orders", content=fail_body, headers=fail_headers).status_code == 500
    assert calls == [MSG_ID, "b", "d", "d"]

"""A receiver built with the Flask helper takes the platform's real webhook (signed by the
platform's delivery engine, over the network), and refuses the same request replayed, with its
body tampered, its timestamp old, or checked against another secret; after a rotation, a
receiver still holding the previous secret takes it."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest
import standardwebhooks

flask = pytest.importorskip("flask")
from werkzeug.serving import make_server  # noqa: E402 (flask only if installed)

from delayclient.receivers.flask import webhook_view  # noqa: E402


class Hooks:
    """A Flask app on a free port: /hook (the endpoint's secret, read at each request) and
    /wrong (another secret); every request's raw body and headers kept."""

    def __init__(self):
        self.secret = None
        self.handled, self.requests = [], []
        app = flask.Flask("hooks")
        other = "whsec_" + base64.b64encode(os.urandom(32)).decode()

        @app.before_request
        def keep():
            self.requests.append((flask.request.path, flask.request.get_data(), dict(flask.request.headers)))

        @app.post("/hook")
        @webhook_view(secret=lambda: self.secret)
        def hook(webhook):
            self.handled.append(webhook)

        @app.post("/wrong")
        @webhook_view(secret=other)
        def wrong(webhook):
            self.handled.append(webhook)

        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def post(self, path: str, body: bytes, headers: dict) -> httpx.Response:
        keep = {k: v for k, v in headers.items() if k.lower().startswith("webhook-") or k.lower() == "content-type"}
        return httpx.post(self.url + path, content=body, headers=keep, timeout=10)


@pytest.fixture
def hooks():
    made = Hooks()
    yield made
    made.server.shutdown()


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_the_platforms_webhook_is_accepted_and_forgeries_refused(client, hooks, unique):
    endpoint = client.endpoints.create(f"hook-{unique}", handler="webhook", handler_target=f"{hooks.url}/hook")
    hooks.secret = endpoint.webhook_secret
    message = client.messages.schedule(endpoint.name, {"order": 7, "note": "café"}, delay=0.5)
    wait_for(lambda: hooks.handled, 30, "the webhook")
    (webhook,) = hooks.handled
    assert webhook.id == message.id and webhook.payload == {"order": 7, "note": "café"}
    wait_for(lambda: client.messages.get(message.id).status == "delivered", 15, "the delivery to be recorded")
    (_, body, headers), = [r for r in hooks.requests if r[0] == "/hook"]

    replayed = hooks.post("/hook", body, headers)
    assert replayed.status_code == 200 and replayed.json() == {"duplicate": True}
    tampered = hooks.post("/hook", body.replace(b"7", b"8"), headers)
    assert tampered.status_code == 400 and "signature" in tampered.json()["error"]
    old = datetime.now(timezone.utc) - timedelta(hours=1)
    resigned = standardwebhooks.Webhook(endpoint.webhook_secret).sign(f"{message.id}-old", old, body.decode())
    stale = hooks.post("/hook", body, {"content-type": "application/json", "webhook-id": f"{message.id}-old",
                                       "webhook-timestamp": str(int(old.timestamp())),
                                       "webhook-signature": resigned})
    assert stale.status_code == 400 and "old" in stale.json()["error"]
    stranger = hooks.post("/wrong", body, headers)
    assert stranger.status_code == 400
    assert len(hooks.handled) == 1  # none of the four reached the handler


def test_after_a_rotation_the_previous_secret_still_verifies(client, hooks, unique):
    endpoint = client.endpoints.create(f"rot-{unique}", handler="webhook", handler_target=f"{hooks.url}/hook")
    hooks.secret = endpoint.webhook_secret  # the receiver has not switched yet
    rotated = client.endpoints.rotate_secret(endpoint.name, previous_valid_seconds=600)
    message = client.messages.schedule(endpoint.name, {"after": "rotation"}, delay=0.2)
    wait_for(lambda: hooks.handled, 30, "the webhook")
    (_, body, headers), = [r for r in hooks.requests if r[0] == "/hook"]
    from delayclient.receivers import verify

    # a receiver that has switched, keeping the previous secret for the window, takes it too (the
    # platform signs with both once its workers have the new one; until then with the old alone)
    switched = verify(body, headers, rotated.webhook_secret, previous_secret=endpoint.webhook_secret)
    assert switched.payload == {"after": "rotation"}
    assert hooks.handled[0].id == message.id
    assert json.loads(body) == {"after": "rotation"}

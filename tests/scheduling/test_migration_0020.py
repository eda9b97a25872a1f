"""Migration 0020's data step: every webhook secret stored in clear is sealed with the first key of
DELAY_SECRETS_KEYS, after which the database holds no secret, and a receiver holding its secret
verifies what the platform signs; and back."""

import importlib
import time
from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.apps import apps
from django.db import connection
from django.utils import timezone
from standardwebhooks import Webhook

from scheduling.delivery.handlers import webhook_headers
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.security import secret_box, webhook_signing

pytestmark = pytest.mark.django_db
step = importlib.import_module("scheduling.migrations.0020_seal_webhook_secrets")
KEY = Fernet.generate_key().decode()


@pytest.fixture
def rows(versions, settings):
    """name -> (current, previous) as stored before the step: in clear, but one row a new process
    sealed already (rolling upgrade) and one without a webhook."""
    settings.DELAY_SECRETS_KEYS = [KEY]
    made = {}
    for i in range(3):
        made[f"clear-{i}"] = (webhook_signing.generate_secret(), webhook_signing.generate_secret() if i else "")
    made["sealed"] = (secret_box.seal(webhook_signing.generate_secret()), "")
    made["no-webhook"] = ("", "")
    for name, (current, previous) in made.items():
        Endpoint.objects.create(name=name, queue=name, topology=versions["v2"], handler="webhook" if current else "none",
                                handler_target="https://example.com/h" if current else "", webhook_secret=current,
                                webhook_secret_previous=previous,
                                webhook_secret_previous_expires_at=timezone.now() + timedelta(hours=1))
    return made


def stored() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, webhook_secret, webhook_secret_previous FROM scheduling_endpoint")
        return {name: (current, previous) for name, current, previous in cursor.fetchall()}


def test_sealing_leaves_no_secret_in_the_database_and_receivers_still_verify(rows):
    step.seal_secrets(apps, None)
    after = stored()
    secrets = {s for name, pair in rows.items() if name.startswith("clear") for s in pair if s}
    assert len(secrets) == 5
    for current, previous in after.values():
        for value in (current, previous):
            assert "whsec_" not in value and value not in secrets and not any(s[6:] in value for s in secrets)
    assert after["sealed"] == rows["sealed"] and after["no-webhook"] == ("", "")
    for name, (current, previous) in rows.items():
        if name.startswith("clear"):
            assert tuple(secret_box.open(v) for v in after[name]) == (current, previous)
            assert all(Fernet(KEY).decrypt(v.removeprefix("enc1:").encode()) for v in after[name] if v)
            # what the platform signs from the sealed row, a receiver verifies with the plaintext
            endpoint = Endpoint.objects.get(name=name)
            message = ScheduledMessage(endpoint=endpoint, due_at=timezone.now(), payload={"n": 1})
            body, timestamp = b'{"n":1}', int(time.time())
            headers = webhook_headers(message, body, timestamp=timestamp)
            assert Webhook(current).verify(body, headers) == {"n": 1}
            if previous:
                assert Webhook(previous).verify(body, headers) == {"n": 1}
            assert headers["X-Delay-Signature"] == webhook_signing.legacy_signature(
                webhook_signing.signing_key(current), body)
    step.seal_secrets(apps, None)  # a second run changes nothing
    assert stored() == after


def test_the_reverse_step_gives_the_secrets_back_in_clear(rows):
    sealed_by_new_code = secret_box.open(rows["sealed"][0])
    step.seal_secrets(apps, None)
    step.open_secrets(apps, None)
    back = stored()
    assert {name: back[name] for name in rows if name != "sealed"} == {n: p for n, p in rows.items() if n != "sealed"}
    assert back["sealed"] == (sealed_by_new_code, "")


def test_the_reverse_step_without_the_key_stops(rows, settings):
    step.seal_secrets(apps, None)
    settings.DELAY_SECRETS_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(secret_box.SealedWithUnknownKey, match="not among the keys of DELAY_SECRETS_KEYS"):
        step.open_secrets(apps, None)

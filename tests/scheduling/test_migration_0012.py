"""Migration 0012's data step: secrets from before the Standard Webhooks format become whsec_
secrets with the same HMAC key, so a receiver holding the old secret verifies what the platform
now sends; and back."""

import hashlib
import hmac
import importlib
import time

import pytest
from django.apps import apps
from standardwebhooks import Webhook

from scheduling.models import Endpoint
from scheduling.security import webhook_signing

pytestmark = pytest.mark.django_db
step = importlib.import_module("scheduling.migrations.0012_secret_rotation_and_scheduled_in_past")
LEGACY = ["a" * 64, "a-secret-of-sixteen-or-more", "ünïcode-secret-€-1234", "x" * 128]


@pytest.fixture
def rows(versions):
    made = [Endpoint.objects.create(name=f"legacy-{i}", queue=f"legacy-{i}", topology=versions["v2"], handler="webhook",
                                    handler_target="https://example.com/h", webhook_secret=secret)
            for i, secret in enumerate(LEGACY)]
    made.append(Endpoint.objects.create(name="no-webhook", queue="no-webhook", topology=versions["v2"]))
    made.append(Endpoint.objects.create(name="already", queue="already", topology=versions["v2"], handler="webhook",
                                        handler_target="https://example.com/h",
                                        webhook_secret=webhook_signing.generate_secret()))
    return made


def test_legacy_secrets_keep_their_key_in_the_new_format(rows):
    before = {e.name: e.webhook_secret for e in Endpoint.objects.all()}
    step.secrets_to_standard_webhooks(apps, None)
    after = {e.name: e.webhook_secret for e in Endpoint.objects.all()}
    assert after["no-webhook"] == "" and after["already"] == before["already"]
    for i, old in enumerate(LEGACY):
        new = after[f"legacy-{i}"]
        assert new.startswith("whsec_") and webhook_signing.signing_key(new) == old.encode()
        # what the platform now signs, a receiver verifies with the library and the converted
        # secret, and the old receiver's own check of X-Delay-Signature still holds
        body, timestamp = b'{"n":1}', int(time.time())
        headers = {"webhook-id": "m", "webhook-timestamp": str(timestamp), "webhook-signature": webhook_signing.signature(
            [webhook_signing.signing_key(new)], message_id="m", timestamp=timestamp, body=body)}
        assert Webhook(new).verify(body, headers) == {"n": 1}
        assert webhook_signing.legacy_signature(webhook_signing.signing_key(new), body) == \
            "sha256=" + hmac.new(old.encode(), body, hashlib.sha256).hexdigest()
    step.secrets_to_standard_webhooks(apps, None)  # a second run changes nothing
    assert {e.name: e.webhook_secret for e in Endpoint.objects.all()} == after


def test_the_reverse_step_gives_the_old_secrets_back(rows):
    generated = Endpoint.objects.get(name="already").webhook_secret
    step.secrets_to_standard_webhooks(apps, None)
    step.secrets_to_plain(apps, None)
    restored = {e.name: e.webhook_secret for e in Endpoint.objects.all()}
    assert [restored[f"legacy-{i}"] for i in range(len(LEGACY))] == LEGACY
    assert restored["already"] == generated  # random key bytes have no text form: kept

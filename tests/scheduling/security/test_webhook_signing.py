"""Secrets and signatures against the published Standard Webhooks library (standardwebhooks):
what we sign, it verifies; what it refuses (old timestamps, the wrong key), stays refused."""

import base64
import time

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from scheduling.security import webhook_signing

BODY = '{"order":7,"name":"Zoë"}'.encode()


def headers(secrets, *, message_id="msg-1", timestamp=None):
    timestamp = int(time.time()) if timestamp is None else timestamp
    keys = [webhook_signing.signing_key(s) for s in secrets]
    return {"webhook-id": message_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": webhook_signing.signature(keys, message_id=message_id, timestamp=timestamp, body=BODY)}


def test_generated_secrets_are_fresh_32_byte_keys_the_library_reads():
    one, two = webhook_signing.generate_secret(), webhook_signing.generate_secret()
    assert one != two and one.startswith("whsec_") and webhook_signing.secret_problem(one) is None
    assert len(webhook_signing.signing_key(one)) == 32
    assert Webhook(one).verify(BODY, headers([one])) == {"order": 7, "name": "Zoë"}


def test_a_replayed_or_forged_request_is_refused_by_the_library():
    secret = webhook_signing.generate_secret()
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(secret).verify(BODY, headers([secret], timestamp=int(time.time()) - 6 * 60))
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(webhook_signing.generate_secret()).verify(BODY, headers([secret]))
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(secret).verify(BODY + b" ", headers([secret]))


def test_two_secrets_sign_side_by_side_and_either_verifies():
    old, new = webhook_signing.generate_secret(), webhook_signing.generate_secret()
    both = headers([new, old])
    assert len(both["webhook-signature"].split(" ")) == 2
    assert Webhook(old).verify(BODY, both) and Webhook(new).verify(BODY, both)


def test_a_legacy_secret_keeps_its_key():
    legacy = "a-secret-of-sixteen-or-more"
    converted = webhook_signing.from_legacy(legacy)
    assert converted == "whsec_" + base64.b64encode(legacy.encode()).decode()
    assert webhook_signing.signing_key(converted) == webhook_signing.signing_key(legacy) == legacy.encode()
    assert webhook_signing.legacy_signature(webhook_signing.signing_key(converted), b"{}") == \
        "sha256=" + __import__("hmac").new(legacy.encode(), b"{}", "sha256").hexdigest()
    assert Webhook(converted).verify(BODY, headers([converted]))


@pytest.mark.parametrize(("secret", "says"), [
    ("a-secret-of-sixteen-or-more", "must be whsec_ followed by the base64 of 24 to 64 random bytes"),
    ("whsec_not base64!", "is not base64"),
    ("whsec_" + base64.b64encode(b"k" * 16).decode(), "not 16 bytes"),
    ("whsec_" + base64.b64encode(b"k" * 65).decode(), "not 65 bytes"),
])
def test_secrets_in_another_shape_are_refused(secret, says):
    assert says in webhook_signing.secret_problem(secret)


@pytest.mark.parametrize("size", [24, 64])
def test_keys_of_24_to_64_bytes_are_accepted(size):
    assert webhook_signing.secret_problem("whsec_" + base64.b64encode(b"k" * size).decode()) is None

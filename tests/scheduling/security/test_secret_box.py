"""Webhook secrets sealed at rest (scheduling/security/secret_box.py): what the database holds is
no secret, a receiver holding the plaintext verifies what the platform signs, the encryption key
rotates (new key first, rotate_secrets_key, old key dropped) without a secret lost, and a missing
or wrong key fails with a line that says so."""

import io
from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from standardwebhooks import Webhook

from harness.recording_server import RecordingServer
from scheduling.delivery.services import delivery_receive
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.security import secret_box, webhook_signing

OLD, NEW, OTHER = (Fernet.generate_key().decode() for _ in range(3))


def stored_values() -> list[str]:
    """Every secret column of every endpoint, as PostgreSQL holds it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT webhook_secret, webhook_secret_previous FROM scheduling_endpoint")
        return [value for row in cursor.fetchall() for value in row]


def test_a_sealed_secret_is_not_the_secret_and_opens_to_it(settings):
    settings.DELAY_SECRETS_KEYS = [NEW]
    secret = webhook_signing.generate_secret()
    sealed = secret_box.seal(secret)
    assert sealed.startswith("enc1:") and "whsec_" not in sealed and secret[6:] not in sealed
    assert secret_box.seal(secret) != sealed  # randomised: equal secrets are not seen equal
    assert secret_box.open(sealed) == secret
    assert Fernet(NEW).decrypt(sealed.removeprefix("enc1:").encode()).decode() == secret  # the first key's
    assert len(secret_box.seal(webhook_signing.PREFIX + "A" * 88)) <= Endpoint._meta.get_field("webhook_secret").max_length
    assert secret_box.seal("") == "" and secret_box.open("") == ""


def test_a_value_in_clear_opens_as_it_is(settings):
    """Rows written before migration 0020 (by a process still on the old code, in a rolling
    upgrade) keep signing."""
    settings.DELAY_SECRETS_KEYS = [NEW]
    secret = webhook_signing.generate_secret()
    assert secret_box.open(secret) == secret and not secret_box.is_sealed_with_first_key(secret)


def test_unset_the_key_is_derived_from_the_secret_key(settings):
    settings.DELAY_SECRETS_KEYS = ""
    sealed = secret_box.seal("whsec_x")
    derived = secret_box.derived_key(settings.SECRET_KEY)
    assert Fernet(derived).decrypt(sealed.removeprefix("enc1:").encode()) == b"whsec_x"
    assert derived == secret_box.derived_key(settings.SECRET_KEY) != secret_box.derived_key("another key")
    settings.SECRET_KEY = "another key"
    with pytest.raises(secret_box.SealedWithUnknownKey,
                       match=r"not among the key derived from SECRET_KEY \(DELAY_SECRETS_KEYS is unset\)"):
        secret_box.open(sealed)


def test_a_wrong_or_missing_key_says_so(settings):
    settings.DELAY_SECRETS_KEYS = [OLD]
    sealed = secret_box.seal("whsec_x")
    settings.DELAY_SECRETS_KEYS = [OTHER]
    with pytest.raises(secret_box.SealedWithUnknownKey) as error:
        secret_box.open(sealed)
    assert "not among the keys of DELAY_SECRETS_KEYS" in str(error.value) and "\n" not in str(error.value)
    assert OTHER not in str(error.value) and OLD not in str(error.value)
    with pytest.raises(secret_box.SealedWithUnknownKey):
        secret_box.open("enc1:damaged")


# --- the database: endpoints sealed with the old key, and the key's rotation ------------------------


@pytest.fixture
def sealed_rows(db, versions, settings):
    """Five webhook endpoints sealed with OLD (every other one mid-rotation, with a previous
    secret), one written in clear by an older process, and one without a webhook: pk -> plaintexts."""
    settings.DELAY_SECRETS_KEYS = [OLD]
    plain = {}
    for i in range(6):
        current, previous = webhook_signing.generate_secret(), webhook_signing.generate_secret() if i % 2 else ""
        seal = secret_box.seal if i < 5 else str
        row = Endpoint.objects.create(name=f"sealed-{i}", queue=f"sealed-{i}", topology=versions["v2"],
                                      handler="webhook", handler_target="https://example.com/h",
                                      webhook_secret=seal(current), webhook_secret_previous=seal(previous))
        plain[row.pk] = (current, previous)
    row = Endpoint.objects.create(name="no-webhook", queue="no-webhook", topology=versions["v2"])
    plain[row.pk] = ("", "")
    return plain


def opened() -> dict:
    return {row.pk: (secret_box.open(row.webhook_secret), secret_box.open(row.webhook_secret_previous))
            for row in Endpoint.objects.all()}


def test_the_database_holds_no_secret(sealed_rows):
    call_command("rotate_secrets_key", stdout=io.StringIO())  # seals the one in clear too
    values = stored_values()
    secrets = {secret for pair in sealed_rows.values() for secret in pair if secret}
    assert len(secrets) == 9 and values
    assert not [v for v in values if "whsec_" in v or v in secrets or any(s[6:] in v for s in secrets)]
    assert opened() == sealed_rows


def test_rotating_the_encryption_key(sealed_rows, settings):
    settings.DELAY_SECRETS_KEYS = [NEW, OLD]  # 1. the new key first: it seals, both open
    assert opened() == sealed_rows
    out = io.StringIO()
    call_command("rotate_secrets_key", "--batch", "3", stdout=out)  # 2. every value sealed with the new key
    lines = out.getvalue().splitlines()
    assert lines == ["endpoints: 3/7 ", "endpoints: 6/7 ", "endpoints: 7/7 ",
                     "Re-sealed the secrets of 6 of 7 endpoint(s) with the first key of DELAY_SECRETS_KEYS; "
                     "the others had it already."]
    for value in filter(None, stored_values()):
        Fernet(NEW).decrypt(value.removeprefix("enc1:").encode())
    settings.DELAY_SECRETS_KEYS = [NEW]  # 3. the old key dropped: everything still opens
    assert opened() == sealed_rows
    before = stored_values()
    again = io.StringIO()
    call_command("rotate_secrets_key", stdout=again)  # idempotent: nothing left to do
    assert "Re-sealed the secrets of 0 of 7 endpoint(s)" in again.getvalue() and stored_values() == before


def test_rotation_without_the_old_key_stops_with_one_line_and_loses_nothing(sealed_rows, settings):
    settings.DELAY_SECRETS_KEYS = [NEW]  # the old key dropped too early
    before = stored_values()
    with pytest.raises(CommandError) as error:
        call_command("rotate_secrets_key", stdout=io.StringIO())
    message = str(error.value)
    assert "\n" not in message and message.startswith("rotate_secrets_key stopped")
    assert "endpoint 'sealed-0'" in message and "not among the keys of DELAY_SECRETS_KEYS" in message
    assert stored_values() == before  # the batch is rolled back
    settings.DELAY_SECRETS_KEYS = [NEW, OLD]  # put it back, run again
    call_command("rotate_secrets_key", stdout=io.StringIO())
    settings.DELAY_SECRETS_KEYS = [NEW]
    assert opened() == sealed_rows


def test_a_batch_size_of_nothing_is_refused(db):
    with pytest.raises(CommandError, match="--batch must be at least 1"):
        call_command("rotate_secrets_key", "--batch", "0", stdout=io.StringIO())


# --- what a receiver sees -----------------------------------------------------------------------------


def deliver(endpoint: Endpoint) -> ScheduledMessage:
    now = timezone.now()
    message = ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, payload={"order": 7},
                                              due_at=now, requested_delay_ms=0, status=ScheduledMessage.Status.PUBLISHED,
                                              created_at=now - timedelta(minutes=1))
    delivery_receive(message_id=str(message.id))
    message.refresh_from_db()
    return message


def test_a_receiver_verifies_with_the_plaintext_secret(sealed_rows, versions, settings):
    settings.DELAY_SECRETS_KEYS = [NEW, OLD]
    current, previous = webhook_signing.generate_secret(), webhook_signing.generate_secret()
    with RecordingServer() as server:
        endpoint = Endpoint.objects.create(
            name="receiver", queue="receiver", topology=versions["v2"], handler="webhook",
            handler_target=server.url, webhook_secret=secret_box.seal(current),
            webhook_secret_previous=secret_box.seal(previous),
            webhook_secret_previous_expires_at=timezone.now() + timedelta(hours=1))
        assert deliver(endpoint).status == ScheduledMessage.Status.DELIVERED
    (request,) = server.requests
    assert Webhook(current).verify(request["body"], request["headers"]) == {"order": 7}
    assert Webhook(previous).verify(request["body"], request["headers"]) == {"order": 7}  # the overlap


def test_a_webhook_sealed_with_a_missing_key_fails_saying_so(sealed_rows, settings):
    with RecordingServer() as server:
        endpoint = Endpoint.objects.filter(handler="webhook").first()
        Endpoint.objects.filter(pk=endpoint.pk).update(handler_target=server.url)
        endpoint.refresh_from_db()
        settings.DELAY_SECRETS_KEYS, settings.DELAY_HANDLER_MAX_RETRIES = [OTHER], 0
        message = deliver(endpoint)
    assert message.status == ScheduledMessage.Status.FAILED and server.requests == []
    assert message.last_error.startswith("handler attempt 1: SealedWithUnknownKey: a webhook secret is sealed with "
                                         "a key that is not among the keys of DELAY_SECRETS_KEYS")

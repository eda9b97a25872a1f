"""Webhook verification and replay refusal, signed as the platform signs (Standard Webhooks over the
payload's compact JSON), without a platform."""

from __future__ import annotations

import base64
import json
import threading
from datetime import datetime, timedelta, timezone
from math import floor

import pytest
import standardwebhooks

from delayclient.receivers import (
    MAX_HEADER,
    CacheStore,
    MemoryStore,
    Receiver,
    SeenStore,
    Webhook,
    WebhookError,
    WebhookReplayed,
    verify,
)

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"o" * 32).decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"x" * 32).decode()
MSG_ID = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


def signed(payload=None, *, secrets=(SECRET,), msg_id=MSG_ID, at: datetime | None = None,
           body: str | None = None):
    """(body, headers) as the platform sends them: webhook-id the message id, one v1 signature per
    valid secret, space-separated."""
    if body is None:
        body = json.dumps({"order": 42, "note": "café ✓"} if payload is None else payload,
                          separators=(",", ":"), ensure_ascii=False)
    at = at or datetime.now(timezone.utc)
    signature = " ".join(standardwebhooks.Webhook(s).sign(msg_id, at, body) for s in secrets)
    timestamp = str(floor(at.timestamp()))
    headers = {"webhook-id": msg_id, "webhook-timestamp": timestamp, "webhook-signature": signature}
    return body.encode(), headers


def refused(body, headers, secret=SECRET, **kwargs) -> str:
    with pytest.raises(WebhookError) as info:
        verify(body, headers, secret, **kwargs)
    assert not isinstance(info.value, WebhookReplayed)
    return str(info.value)


def test_good_webhook_verifies():
    at = datetime.now(timezone.utc).replace(microsecond=0)
    body, headers = signed(at=at)
    webhook = verify(body, headers, SECRET)
    assert webhook == Webhook(id=MSG_ID, timestamp=at, payload={"order": 42, "note": "café ✓"}, body=body)
    assert webhook.timestamp.tzinfo == timezone.utc
    assert verify(body.decode(), headers, SECRET).payload == {"order": 42, "note": "café ✓"}  # a str body too
    with pytest.raises(AttributeError):
        webhook.id = "other"  # frozen


@pytest.mark.parametrize("payload", [[1, 2], "text", 3.5, True])
def test_any_json_payload(payload):
    assert verify(*signed(payload), SECRET).payload == payload


@pytest.mark.parametrize("case", [str.title, str.upper, str.lower])
def test_header_names_any_case(case):
    body, headers = signed()
    assert verify(body, {case(k): v for k, v in headers.items()}, SECRET).id == MSG_ID


def test_tampered_body_refused():
    body, headers = signed()
    assert "no signature matches" in refused(body.replace(b"42", b"43"), headers)


def test_tampered_id_or_timestamp_refused():
    body, headers = signed()
    refused(body, {**headers, "webhook-id": "another-id"})
    refused(body, {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) - 1)})


def test_wrong_secret_refused():
    assert "no signature matches the secret" in refused(*signed(), secret=OTHER_SECRET)


def test_old_timestamp_refused():
    reason = refused(*signed(at=datetime.now(timezone.utc) - timedelta(seconds=400)))
    assert "old" in reason and "300 s" in reason


def test_future_timestamp_refused():
    assert "ahead" in refused(*signed(at=datetime.now(timezone.utc) + timedelta(days=1)))
    assert "ahead" in refused(*signed(at=datetime.now(timezone.utc) + timedelta(seconds=400)))


def test_tolerance_narrower():
    body, headers = signed(at=datetime.now(timezone.utc) - timedelta(seconds=120))
    assert verify(body, headers, SECRET).id == MSG_ID
    assert "old" in refused(body, headers, tolerance=60)


def test_tolerance_beyond_the_library_refused():
    with pytest.raises(ValueError):
        verify(*signed(), SECRET, tolerance=301)
    with pytest.raises(ValueError):
        Receiver(SECRET, tolerance=0)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_header_refused(missing):
    body, headers = signed()
    assert missing in refused(body, {k: v for k, v in headers.items() if k != missing})
    assert missing in refused(body, {**headers, missing: ""})


@pytest.mark.parametrize("timestamp", ["1.7e9", "-5", " 1700000000", "abc", "１２３"])
def test_timestamp_not_unix_seconds_refused(timestamp):
    body, headers = signed()
    assert "Unix seconds" in refused(body, {**headers, "webhook-timestamp": timestamp})


@pytest.mark.parametrize("signature", ["garbage", "v1,a,b", "v1,!!!", "v1,abc", "v1,  v1,x"])
def test_malformed_signature_is_a_webhook_error(signature):
    body, headers = signed()
    refused(body, {**headers, "webhook-signature": signature})


def test_other_versions_ignored():
    body, headers = signed()
    headers["webhook-signature"] = "v2,AAAA " + headers["webhook-signature"]
    assert verify(body, headers, SECRET).id == MSG_ID


def test_body_over_the_bound_refused():
    body, headers = signed({"blob": "a" * 2000})
    assert "body over 1000 bytes" in refused(body, headers, max_body=1000)
    assert verify(body, headers, SECRET, max_body=len(body)).id == MSG_ID


def test_header_of_silly_length_refused():
    body, headers = signed()
    long = headers["webhook-signature"] + " v1," + "A" * MAX_HEADER
    assert "over 1024 characters" in refused(body, {**headers, "webhook-signature": long})


def test_not_json_or_not_utf8_refused():
    assert "not JSON" in refused(*signed(body="{not json"))
    body, headers = signed()
    assert "not UTF-8" in refused(b"\xff" + body, headers)


@pytest.mark.parametrize("secret", ["", "k" * 32, "whsec_", "whsec_not base64!", "whsec_abc$"])
def test_malformed_secret_is_a_configuration_error(secret):
    with pytest.raises(ValueError):
        verify(*signed(), secret)
    with pytest.raises(ValueError):
        Receiver(secret or "whsec_")


def test_rotation_two_signatures_either_secret_verifies():
    body, headers = signed(secrets=(SECRET, OLD_SECRET))
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert verify(body, headers, SECRET).id == MSG_ID  # a receiver already given the new one
    assert verify(body, headers, OLD_SECRET).id == MSG_ID  # one still holding the old one
    refused(body, headers, secret=OTHER_SECRET)


def test_previous_secret_accepted():
    """After the platform's overlap ended, a receiver holding the new secret and the old one."""
    body, headers = signed(secrets=(OLD_SECRET,))
    assert "or the previous secret" in refused(body, headers, secret=SECRET, previous_secret=OTHER_SECRET)
    assert verify(body, headers, SECRET, previous_secret=OLD_SECRET).id == MSG_ID
    assert verify(*signed(), SECRET, previous_secret=OLD_SECRET).id == MSG_ID


def test_replay_refused_only_after_done():
    receiver = Receiver(SECRET)
    body, headers = signed()
    webhook = receiver.verify(body, headers)
    assert receiver.verify(body, headers) == webhook  # the handling failed: the retry is handled
    receiver.done(webhook)
    with pytest.raises(WebhookReplayed):
        receiver.verify(body, headers)
    # the platform's redelivery: same id, fresh timestamp and signature
    with pytest.raises(WebhookReplayed):
        receiver.verify(*signed(at=datetime.now(timezone.utc) + timedelta(seconds=30)))
    assert receiver.verify(*signed(msg_id="another")).id == "another"


def test_replay_checked_after_the_signature():
    receiver = Receiver(SECRET)
    body, headers = signed()
    receiver.done(receiver.verify(body, headers))
    with pytest.raises(WebhookError) as info:
        receiver.verify(*signed(secrets=(OTHER_SECRET,)))
    assert not isinstance(info.value, WebhookReplayed)


def test_receiver_secrets_read_at_each_request():
    current = {"secret": OLD_SECRET, "previous": None}
    receiver = Receiver(lambda: current["secret"], previous_secret=lambda: current["previous"])
    assert receiver.verify(*signed(secrets=(OLD_SECRET,), msg_id="a")).id == "a"
    current.update(secret=SECRET, previous=OLD_SECRET)  # rotated in the settings, no restart
    assert receiver.verify(*signed(secrets=(OLD_SECRET,), msg_id="b")).id == "b"
    current.update(previous=None)
    with pytest.raises(WebhookError):
        receiver.verify(*signed(secrets=(OLD_SECRET,), msg_id="c"))
    current.update(secret=None)
    with pytest.raises(ValueError):  # unset: a server error, not the sender's
        receiver.verify(*signed())


def test_remember_covers_the_replay_window():
    assert Receiver(SECRET, tolerance=300, remember=10).remember == 600
    assert Receiver(SECRET).remember == 3600


def test_memory_store_evicts_oldest_past_the_cap():
    store = MemoryStore(max_ids=3)
    for id in "abcd":
        store.add(id, 60)
    assert len(store) == 3
    assert [store.seen(id) for id in "abcd"] == [False, True, True, True]
    store.add("b", 60)  # added again: now the newest
    store.add("e", 60)
    assert [store.seen(id) for id in "bcde"] == [True, False, True, True]


def test_memory_store_expires():
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    store.add("a", 10)
    store.add("b", 20)
    now[0] += 15
    assert not store.seen("a") and store.seen("b")
    store.add("c", 10)
    assert len(store) == 2  # "a" left
    now[0] += 8
    assert not store.seen("b") and store.seen("c")


def test_memory_store_threads_stay_under_the_cap():
    store = MemoryStore(max_ids=500)

    def add(prefix):
        for i in range(2000):
            store.add(f"{prefix}-{i}", 60)
            store.seen(f"{prefix}-{i // 2}")

    threads = [threading.Thread(target=add, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(store) == 500


class FakeCache:
    """Django's cache API, the part CacheStore uses."""

    def __init__(self):
        self.data: dict[str, tuple[object, int]] = {}

    def get(self, key, default=None):
        return self.data.get(key, (default,))[0]

    def add(self, key, value, timeout=None) -> bool:
        if key in self.data:
            return False
        self.data[key] = (value, timeout)
        return True


def test_cache_store_shared_by_receivers():
    cache = FakeCache()
    first, second = Receiver(SECRET, seen=CacheStore(cache)), Receiver(SECRET, seen=CacheStore(cache))
    body, headers = signed()
    first.done(first.verify(body, headers))
    with pytest.raises(WebhookReplayed):
        second.verify(body, headers)
    assert cache.data == {f"delayclient:webhook:{MSG_ID}": (1, 3600)}
    assert isinstance(CacheStore(cache), SeenStore) and isinstance(MemoryStore(), SeenStore)


def test_cache_store_keys_are_safe():
    store = CacheStore(FakeCache(), prefix="p:")
    assert store.key("a b\n" + "x" * 300).startswith("p:sha256:")
    assert len(store.key("a b\n" + "x" * 300)) == len("p:sha256:") + 64
    store.add("a b", 0.2)
    assert store.seen("a b") and not store.seen("a-b")

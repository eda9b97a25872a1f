"""The guards' policy, table-driven: which addresses a webhook may reach (with and without
DELAY_WEBHOOK_ALLOWED_NETWORKS), which URLs are refused before any lookup, which Celery task
names a celery_task endpoint may run. Names resolve for real (localhost is in /etc/hosts)."""

import pytest

from scheduling.core.networks import parse_networks
from scheduling.security.guards import (
    TargetRefused,
    address_refusal,
    checked_addresses,
    task_refusal,
    webhook_url_refusal,
)

LOCAL = parse_networks("127.0.0.1/32")


@pytest.mark.parametrize(("address", "kind"), [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("10.0.0.1", "private"), ("172.16.5.4", "private"), ("192.168.1.1", "private"), ("fd12::1", "private"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"), ("fe80::1%lo", "link-local"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"), ("ff02::1", "multicast"),
    ("100.64.0.1", "shared (100.64.0.0/10)"), ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"),
    ("192.0.2.10", "private"),  # documentation range: Python counts it private
    ("::ffff:127.0.0.1", "IPv6 address carrying a loopback IPv4 address"),
    ("::ffff:169.254.169.254", "IPv6 address carrying a link-local IPv4 address"),
    ("2002:a00:1::", "IPv6 address carrying a private IPv4 address"),  # 6to4
    ("64:ff9b::a9fe:a9fe", "IPv6 address carrying a link-local IPv4 address"),  # NAT64
])
def test_addresses_inside_are_refused_and_say_why(address, kind):
    assert kind in address_refusal(address, ())


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1",
                                     "64:ff9b::808:808"])
def test_public_addresses_pass(address):
    assert address_refusal(address, ()) is None


@pytest.mark.parametrize(("address", "allowed", "refused"), [
    ("127.0.0.1", "127.0.0.1/32", False), ("127.0.0.2", "127.0.0.1/32", True),
    ("10.1.2.3", "10.1.0.0/16", False), ("10.2.0.1", "10.1.0.0/16", True),
    ("::ffff:127.0.0.1", "127.0.0.1/32", False),  # the mapped form of an allowed address is allowed
    ("::1", "127.0.0.1/32", True), ("::1", "::1/128", False), ("169.254.169.254", "0.0.0.0/0", False),
])
def test_allowed_networks_open_exactly_what_they_name(address, allowed, refused):
    assert (address_refusal(address, parse_networks(allowed)) is not None) is refused


@pytest.mark.parametrize(("url", "says"), [
    ("http://127.0.0.1:8000/hook", "webhook target 127.0.0.1 is a loopback address"),
    ("http://10.0.0.1/", "webhook target 10.0.0.1 is a private address"),
    ("http://169.254.169.254/latest/meta-data/", "webhook target 169.254.169.254 is a link-local address"),
    ("http://[::1]/", "webhook target ::1 is a loopback address"),
    ("http://localhost:9/hook", "webhook target localhost resolves to a loopback address"),
    ("http://2130706433/", "resolves to a loopback"),  # 127.0.0.1 as one number
    ("http://0x7f.1/", "resolves to a loopback"),
    ("http://[::ffff:10.0.0.1]/", "carrying a private IPv4 address"),
    ("http://[fe80::1%25lo]/", "a link-local address"),
    ("ftp://example.com/", "must be an http(s) URL"),
    ("gopher://127.0.0.1/", "must be an http(s) URL"),
    ("http://user:pw@example.com/", "must not carry credentials"),
    ("http://example.com:99999/", "is not a valid URL"),
])
def test_urls_that_reach_inside_or_leak_are_refused(url, says):
    why = webhook_url_refusal(url, ())
    assert why is not None and says in why
    if "webhook target" in why:
        assert "DELAY_WEBHOOK_ALLOWED_NETWORKS" in why


@pytest.mark.parametrize("url", ["http://localhost:9/hook", "http://2130706433/", "http://0x7f.1/",
                                 "http://[::ffff:a00:1]/", "http://[2002:a00:1::]/", "http://[64:ff9b::a9fe:a9fe]/"])
def test_a_refusal_never_names_an_address_the_url_does_not_spell(url):
    """What a name (or an encoded address) resolved to is the inside of a network: the refusal
    reaches API answers and a message's last_error, so it says what kind of address, never which."""
    why = webhook_url_refusal(url, ())
    assert why is not None and "address" in why
    for inside in ("127.0.0.1", "10.0.0.1", "169.254.169.254"):
        assert inside not in why


def test_allowed_network_lets_the_local_receiver_in():
    for url in ("http://127.0.0.1:8000/hook", "http://localhost:9/hook"):
        assert webhook_url_refusal(url, LOCAL) is None


def test_a_public_or_unresolvable_host_is_accepted_and_checked_again_at_send():
    assert webhook_url_refusal("https://8.8.8.8/hook", ()) is None
    assert webhook_url_refusal("https://nothing.invalid/hook", ()) is None


def test_checked_addresses_resolves_every_address_and_refuses_on_any():
    assert checked_addresses("localhost", 80, LOCAL) == ["127.0.0.1"]
    with pytest.raises(TargetRefused, match="localhost resolves to a loopback address"):
        checked_addresses("localhost", 80, ())


@pytest.mark.parametrize(("value", "networks"), [
    ("", ()), ("127.0.0.1/32", ("127.0.0.1/32",)), (" 10.0.0.0/8 , fd00::/8,", ("10.0.0.0/8", "fd00::/8")),
    ("10.1.2.3/8", ("10.0.0.0/8",)), (["192.168.0.0/16"], ("192.168.0.0/16",)),
])
def test_parse_networks(value, networks):
    assert tuple(map(str, parse_networks(value))) == networks


@pytest.mark.parametrize("value", ["localhost", "10.0.0.0/33", "127.0.0.1/32,nope"])
def test_parse_networks_names_what_is_not_a_network(value):
    with pytest.raises(ValueError, match="is not a network"):
        parse_networks(value)


@pytest.mark.parametrize(("name", "patterns", "says"), [
    ("billing.tasks.charge", ["billing.tasks.*"], None),
    ("billing.tasks.charge", ["billing.*", "x"], None),
    ("billing.admin.drop", ["billing.tasks.*"], "matches none of DELAY_CELERY_TASK_ALLOWLIST (billing.tasks.*)"),
    ("billing.tasks.charge", [], "DELAY_CELERY_TASK_ALLOWLIST is empty, so no task may be a handler"),
    ("Billing.tasks.charge", ["billing.tasks.*"], "matches none"),  # case matters, as in Celery
    ("scheduling.deliver", ["*"], "never a handler"),
    ("scheduling.relay.sweep", ["scheduling.*"], "never a handler"),
    ("celery.backend_cleanup", ["*"], "never a handler"),
])
def test_task_allowlist(name, patterns, says):
    why = task_refusal(name, patterns)
    assert why is None if says is None else says in why

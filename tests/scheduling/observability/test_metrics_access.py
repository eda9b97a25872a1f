"""Who may read the metrics: a client on an allowed network, with the bearer token when one is set."""

from http import HTTPStatus

import pytest

from scheduling.config.specs import METRICS_NETWORKS as DEFAULT_NETWORKS
from scheduling.core.networks import parse_networks
from scheduling.observability.metrics_access import is_forwarded, refusal

PRIVATE = parse_networks(DEFAULT_NETWORKS)


@pytest.mark.parametrize("addr, expected", [
    ("127.0.0.1", None), ("10.1.2.3", None), ("172.20.0.5", None), ("192.168.1.9", None), ("::1", None),
    ("::ffff:10.0.0.7", None),  # an IPv4 client on a dual-stack socket
    ("8.8.8.8", HTTPStatus.FORBIDDEN), ("2001:db8::1", HTTPStatus.FORBIDDEN), ("172.32.0.1", HTTPStatus.FORBIDDEN),
    ("", HTTPStatus.FORBIDDEN), (None, HTTPStatus.FORBIDDEN), ("not-an-address", HTTPStatus.FORBIDDEN),
])
def test_by_default_only_loopback_and_private_networks_may_read(addr, expected):
    assert refusal(addr, None, networks=PRIVATE, token="") == expected


@pytest.mark.parametrize("authorization, expected", [
    ("Bearer s3cret", None), ("bearer s3cret", None),
    (None, HTTPStatus.UNAUTHORIZED), ("Bearer wrong", HTTPStatus.UNAUTHORIZED), ("Basic s3cret", HTTPStatus.UNAUTHORIZED),
    ("Bearer ", HTTPStatus.UNAUTHORIZED), ("s3cret", HTTPStatus.UNAUTHORIZED),
])
def test_a_token_when_set_is_required_as_a_bearer_token(authorization, expected):
    assert refusal("10.0.0.2", authorization, networks=PRIVATE, token="s3cret") == expected


def test_the_token_does_not_open_a_network_that_is_not_allowed():
    assert refusal("8.8.8.8", "Bearer s3cret", networks=PRIVATE, token="s3cret") == HTTPStatus.FORBIDDEN
    assert refusal("8.8.8.8", "Bearer s3cret", networks=parse_networks("0.0.0.0/0"), token="s3cret") is None


def test_networks_parse_from_a_list_or_a_string_and_a_bad_one_is_named():
    assert [str(n) for n in parse_networks(" 10.0.0.0/8, ,::1/128")] == ["10.0.0.0/8", "::1/128"]
    assert [str(n) for n in parse_networks(["192.168.1.7"])] == ["192.168.1.7/32"]
    with pytest.raises(ValueError, match="'10.0.0.0/33' is not a network"):
        parse_networks("127.0.0.1/32,10.0.0.0/33")


@pytest.mark.parametrize("token, authorization, expected", [
    ("", None, HTTPStatus.FORBIDDEN),  # forwarded, no token set: the peer's address vouches for nobody
    ("s3cret", None, HTTPStatus.UNAUTHORIZED), ("s3cret", "Bearer wrong", HTTPStatus.UNAUTHORIZED),
    ("s3cret", "Bearer s3cret", None),
])
def test_a_forwarded_request_is_read_only_with_the_token(token, authorization, expected):
    assert refusal("127.0.0.1", authorization, networks=PRIVATE, token=token, forwarded=True) == expected


@pytest.mark.parametrize("environ, forwarded", [
    ({}, False), ({"REMOTE_ADDR": "127.0.0.1", "HTTP_AUTHORIZATION": "Bearer x"}, False),
    ({"HTTP_X_FORWARDED_FOR": "203.0.113.9"}, True), ({"HTTP_FORWARDED": "for=203.0.113.9"}, True),
    ({"HTTP_X_REAL_IP": "203.0.113.9"}, True), ({"HTTP_X_FORWARDED_FOR": ""}, True),  # present, even empty
])
def test_any_forwarding_header_makes_a_request_forwarded(environ, forwarded):
    assert is_forwarded(environ) is forwarded

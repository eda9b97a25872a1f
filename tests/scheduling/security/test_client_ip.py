"""Whom a failed login is counted against: behind the TLS proxy, the address the proxy added last
to X-Forwarded-For (what a client wrote there itself is ignored); otherwise the peer."""

import pytest
from django.test import RequestFactory

from scheduling.security.client_ip import client_ip


@pytest.mark.parametrize(("proxy_header", "forwarded", "expected"), [
    ("", "203.0.113.9", "10.0.0.2"),  # not behind a proxy: a client cannot choose its address
    ("X-Forwarded-Proto", "203.0.113.9", "203.0.113.9"),
    ("X-Forwarded-Proto", "1.2.3.4, 203.0.113.9", "203.0.113.9"),  # 1.2.3.4 is the client's own claim
    ("X-Forwarded-Proto", None, "10.0.0.2"),
])
def test_the_client_address(settings, proxy_header, forwarded, expected):
    settings.DELAY_TLS_PROXY_HEADER = proxy_header
    headers = {"REMOTE_ADDR": "10.0.0.2"} | ({"HTTP_X_FORWARDED_FOR": forwarded} if forwarded else {})
    assert client_ip(RequestFactory().get("/admin/login/", **headers)) == expected

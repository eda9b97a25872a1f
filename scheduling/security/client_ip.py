"""The address a login attempt came from, for django-axes. Behind the TLS-terminating proxy
(DELAY_TLS_PROXY_HEADER set) every request comes from the proxy, so the client is the last
address in X-Forwarded-For: the one the proxy itself added (those before it are the client's
word and could be anything)."""

from django.http import HttpRequest

from scheduling.config.conf import conf


def client_ip(request: HttpRequest) -> str | None:
    if conf().tls_proxy_header:
        forwarded: str = request.META.get("HTTP_X_FORWARDED_FOR", "")  # WSGI: a header's value is text
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last
    remote: str | None = request.META.get("REMOTE_ADDR")
    return remote

"""Request bodies bounded before they are read (scheduling/security/bodies.py) and the API parsing
JSON only: a body over DELAY_MAX_BODY_BYTES is a 413 whether its length is declared or it comes
chunked (as gunicorn passes it: no Content-Length, ``wsgi.input`` read to its end), and nothing of
it is read past the limit or stored. Real PostgreSQL, through the whole middleware stack."""

import io
import json

import pytest

from scheduling.models import ScheduledMessage

pytestmark = pytest.mark.django_db
LIMIT = 65_536


class Counted(io.BytesIO):
    """A request's input that counts what was read of it."""

    taken = 0

    def read(self, size=-1, /):
        chunk = super().read(size)
        self.taken += len(chunk)
        return chunk


@pytest.fixture(autouse=True)
def limit(settings):
    settings.DELAY_MAX_BODY_BYTES = LIMIT


def bulk_body(endpoint, n: int) -> bytes:
    return json.dumps({"messages": [{"endpoint": endpoint.name, "payload": {"pad": "x" * 200}, "delay_seconds": 60}
                                    for _ in range(n)]}).encode()


def post(api, body: bytes, *, chunked: bool, path="/api/messages/bulk/", content_type="application/json"):
    stream = Counted(body)
    extra = {"wsgi.input": stream, "CONTENT_LENGTH": "" if chunked else str(len(body))}
    if chunked:
        extra["HTTP_TRANSFER_ENCODING"] = "chunked"
    response = api.generic("POST", path, b"", content_type=content_type, **extra)
    return response, stream


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_limit_is_a_413_unread_and_nothing_is_stored(api, endpoint_row, chunked):
    body = bulk_body(endpoint_row, 400)
    assert len(body) > LIMIT
    response, stream = post(api, body, chunked=chunked)
    assert response.status_code == 413, response.content
    assert "DELAY_MAX_BODY_BYTES" in response.json()["detail"]
    assert stream.taken == (0 if not chunked else LIMIT + 1)  # declared: none of it; chunked: one byte past
    assert not ScheduledMessage.objects.exists()


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_under_the_limit_is_scheduled_chunked_or_not(api, endpoint_row, chunked):
    body = bulk_body(endpoint_row, 10)
    response, _ = post(api, body, chunked=chunked)
    assert response.status_code == 201, response.content
    assert ScheduledMessage.objects.count() == 10


def test_the_admin_s_bodies_are_bounded_too(admin_client):
    response, stream = post(admin_client, b"x" * (LIMIT + 1), chunked=False, path="/admin/login/",
                            content_type="application/x-www-form-urlencoded")
    assert response.status_code == 413 and stream.taken == 0


@pytest.mark.parametrize("content_type", ["multipart/form-data; boundary=BoUnDaRy", "application/x-www-form-urlencoded"])
def test_the_api_parses_json_only(api, endpoint_row, content_type):
    if content_type.startswith("multipart"):
        body = (f'--BoUnDaRy\r\nContent-Disposition: form-data; name="endpoint"\r\n\r\n{endpoint_row.name}\r\n'
                '--BoUnDaRy\r\nContent-Disposition: form-data; name="payload"\r\n\r\n"x"\r\n'
                '--BoUnDaRy\r\nContent-Disposition: form-data; name="delay_seconds"\r\n\r\n5\r\n'
                '--BoUnDaRy--\r\n').encode()
    else:
        body = f"endpoint={endpoint_row.name}&payload=x&delay_seconds=5".encode()
    response, _ = post(api, body, chunked=False, path="/api/messages/", content_type=content_type)
    assert response.status_code == 415, response.content
    assert not ScheduledMessage.objects.exists()

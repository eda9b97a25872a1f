"""Every route the platform's OpenAPI schema lists has a client method, and every client method
calls a route the schema lists: a new route without a method fails here."""

from delayclient import routes


def test_every_route_has_a_method(client):
    schema = client.platform.openapi()
    listed = {(method.upper(), path) for path, operations in schema["paths"].items()
              for method in operations if method in ("get", "post", "put", "patch", "delete")}
    ours = routes()
    assert len(listed) > 30
    assert sorted(listed - set(ours)) == [], "routes without a client method"
    assert sorted(set(ours) - listed) == [], "client methods for routes the platform does not have"

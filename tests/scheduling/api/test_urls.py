"""The API's routes: every one needs credentials (401 with its Bearer challenge), and the schema
is OpenAPI 3."""

import pytest

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
MID = "00000000-0000-0000-0000-000000000000"


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", "/api/endpoints/"), ("post", "/api/endpoints/"), ("get", "/api/endpoints/x/"),
     ("get", "/api/messages/"), ("post", "/api/messages/"), ("post", "/api/messages/bulk/"),
     ("get", f"/api/messages/{MID}/"), ("post", f"/api/messages/{MID}/cancel/"),
     ("post", f"/api/messages/{MID}/republish/"), ("get", "/api/schema/"), ("get", "/api/"),
     ("get", "/api/schedules/"), ("post", "/api/schedules/"), ("get", "/api/schedules/x/"),
     ("delete", "/api/schedules/x/"), ("post", "/api/schedules/x/pause/"), ("get", "/api/schedules/preview/")],
)
def test_every_route_needs_credentials(client, method, path):
    response = getattr(client, method)(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_schema_is_openapi_3(api):
    response = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert {"/api/messages/", "/api/messages/bulk/", "/api/messages/{id}/cancel/", "/api/endpoints/"} <= set(schema["paths"])

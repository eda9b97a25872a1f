"""Schemathesis against the API's own OpenAPI schema, authenticated as a superuser: every
operation gets 100 generated requests (valid and invalid). None may answer 5xx, and a rejected
request (4xx) must leave no row behind."""

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings

from scheduling.models import Endpoint, ScheduledMessage

pytestmark = [pytest.mark.reliability, pytest.mark.broker, pytest.mark.django_db]

schema = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
schema.app = get_wsgi_application()
CALLS: dict = {"total": 0, "by_status": {}}


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    """The WSGI handler closes database connections after each request; inside this test's
    transaction that would break it (Django's test client disconnects the same signal)."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def auth(admin_user, platform):
    from rest_framework.authtoken.models import Token

    return {"Authorization": f"Token {Token.objects.get_or_create(user=admin_user)[0].key}"}


def counts() -> tuple[int, int]:
    return Endpoint.objects.count(), ScheduledMessage.objects.count()


@schema.parametrize()
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_never_errors_and_stores_nothing_it_rejects(case, auth):
    before = counts()
    response = case.call(headers=auth)
    CALLS["total"] += 1
    CALLS["by_status"][response.status_code] = CALLS["by_status"].get(response.status_code, 0) + 1
    assert response.status_code < 500, f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    if response.status_code >= 400:
        assert counts() == before, f"{case.method} {case.formatted_path} was rejected but stored a row"


def test_enough_cases_were_generated():
    """Runs after the fuzzing above (same module, file order): at least 1,000 requests."""
    if CALLS["total"] == 0:
        pytest.skip("run together with the fuzz test")
    assert CALLS["total"] >= 1000, CALLS
    statuses = CALLS["by_status"]
    assert any(200 <= code < 300 for code in statuses) and any(400 <= code < 500 for code in statuses), statuses
    print(f"\n{CALLS['total']} generated requests, by status: {dict(sorted(statuses.items()))}")

"""A webhook URL's query values and userinfo are shown only to who may change the endpoint (the
team's admins, a key with the endpoints scope); viewers, members and narrower keys see them
masked (security/redaction.py), and the audit log keeps them masked for everyone."""

import pytest

from scheduling.audit.context import AuditContext, audited
from scheduling.audit.services import audit_record, audit_values
from scheduling.core.caller import caller_for_command
from scheduling.models import AuditEvent, Endpoint, Team

pytestmark = pytest.mark.django_db
SECRET_URL = "https://receiver.example.com/in?token=s3cret-token&v=2"
MASKED = "https://receiver.example.com/in?token=***&v=***"


@pytest.fixture
def hooks(versions):
    return Endpoint.objects.create(team=Team.objects.get_or_create(name="growth")[0], name="hooks",
                                   queue="growth--hooks", topology=versions["v3"], handler="webhook",
                                   handler_target=SECRET_URL, webhook_secret="s" * 32)


@pytest.mark.parametrize("role, shown", [("viewer", MASKED), ("member", MASKED), ("admin", SECRET_URL)])
def test_people_below_the_team_s_admins_see_the_url_masked(hooks, api_as, role, shown):
    client = api_as(role, team="growth")
    assert client.get("/api/endpoints/hooks/").json()["handler_target"] == shown
    assert client.get("/api/endpoints/").json()["results"][0]["handler_target"] == shown


@pytest.mark.parametrize("scopes, shown", [(["read"], MASKED), (["read", "endpoints"], SECRET_URL)])
def test_a_key_without_the_endpoints_scope_sees_the_url_masked(hooks, team_key, scopes, shown):
    assert team_key("growth", *scopes).get("/api/endpoints/hooks/").json()["handler_target"] == shown


def test_the_audit_log_never_holds_a_url_s_secrets(hooks):
    with audited(AuditContext(source="command", caller=caller_for_command("test"))):
        audit_record(action="endpoint.create", obj=hooks, team=hooks.team, after=audit_values(obj=hooks))
        audit_record(action="endpoint.update", obj=hooks, team=hooks.team,
                     before={"handler_target": "https://u:pw@old.example.com/x?key=old-secret"},
                     after={"handler_target": SECRET_URL})
    rows = list(AuditEvent.objects.order_by("id"))
    assert [r.after["handler_target"] for r in rows] == [MASKED, MASKED]
    assert rows[1].before == {"handler_target": "https://***@old.example.com/x?key=***"}
    assert not any("s3cret" in str(r.after) or "old-secret" in str(r.before) for r in rows)

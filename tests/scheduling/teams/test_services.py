"""Keys (an expired, revoked or unknown key is a 401, a missing scope a 403, a use is recorded at
most once a minute), quotas (a count over its quota is a 403 naming it, with a metric and a warning
from 80 %), and teams and members made and changed through their services, each audited."""

import logging
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from prometheus_client import REGISTRY

from scheduling.core.caller import Caller
from scheduling.core.errors import QuotaExceeded
from scheduling.endpoints.services import endpoint_create
from scheduling.messages.services import message_schedule_many
from scheduling.models import ApiKey, AuditEvent, Endpoint, ScheduledMessage, Team
from scheduling.teams.quotas import team_forget_counts
from scheduling.teams.services import (
    api_key_authenticate,
    api_key_create,
    api_key_revoke,
    team_create,
    team_update,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def team():
    return team_create(name="billing")


def test_a_key_authenticates_until_revoked_or_expired(team, api_as):
    made = api_key_create(team=team, scopes=["read"])
    found, why = api_key_authenticate(key=made.key)
    assert found.pk == made.row.pk and why == ""
    assert api_key_authenticate(key=made.key + "x") == (None, "invalid key")
    assert api_key_authenticate(key="dpk_" + "A" * 43) == (None, "invalid key")
    assert api_key_authenticate(key=made.key, legacy=True) == (None, "invalid key")  # Token: migrated keys only
    ApiKey.objects.filter(pk=made.row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api_key_authenticate(key=made.key) == (None, "this key has expired")
    ApiKey.objects.filter(pk=made.row.pk).update(expires_at=timezone.now() + timedelta(days=1))
    api_key_revoke(key=made.row)
    assert api_key_authenticate(key=made.key) == (None, "this key was revoked")


@pytest.mark.parametrize("state", ["unknown", "revoked", "expired"])
def test_the_api_answers_401_to_a_dead_key(team, client, platform, state):
    made = api_key_create(team=team, scopes=["all"])
    if state == "revoked":
        api_key_revoke(key=made.row)
    elif state == "expired":
        ApiKey.objects.filter(pk=made.row.pk).update(expires_at=timezone.now())
    key = made.key if state != "unknown" else made.key[:-2] + "zz"
    response = client.get("/api/endpoints/", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 401 and response["WWW-Authenticate"] == 'Bearer realm="api"'
    assert state.rstrip("n").removeprefix("unknow") in response.json()["detail"].lower() or state == "unknown"


def test_a_use_is_recorded_at_most_once_a_minute(team):
    made = api_key_create(team=team, scopes=["read"])
    api_key_authenticate(key=made.key)
    first = ApiKey.objects.get(pk=made.row.pk).last_used_at
    api_key_authenticate(key=made.key)
    assert first is not None and ApiKey.objects.get(pk=made.row.pk).last_used_at == first
    ApiKey.objects.filter(pk=made.row.pk).update(last_used_at=first - timedelta(minutes=2))
    api_key_authenticate(key=made.key)
    assert ApiKey.objects.get(pk=made.row.pk).last_used_at > first - timedelta(minutes=2)


def test_an_expiry_past_the_longest_is_refused(team, settings):
    settings.DELAY_API_KEY_MAX_EXPIRES = "30d"
    with pytest.raises(ValidationError, match="longer than the longest a key may last, 30d"):
        api_key_create(team=team, scopes=["read"], expires_in=timedelta(days=31))
    made = api_key_create(team=team, scopes=["read"], expires_in=timedelta(days=30))
    assert timedelta(days=29) < made.row.expires_at - timezone.now() <= timedelta(days=30)
    settings.DELAY_API_KEY_EXPIRES = "7d"
    default = api_key_create(team=team, scopes=["read"]).row.expires_at - timezone.now()
    assert timedelta(days=6) < default <= timedelta(days=7)
    assert not ApiKey.objects.filter(expires_at__gt=timezone.now() + timedelta(days=30)).exists()


def quota_refusals(team: str, quota: str) -> float:
    return REGISTRY.get_sample_value("delay_team_quota_refusals_total", {"team": team, "quota": quota}) or 0.0


def test_endpoints_past_the_quota_are_a_403_naming_it_with_a_warning_from_80_percent(team, platform, amqp, caplog):
    team = team_update(team=team, max_endpoints=5)
    before = quota_refusals("billing", "endpoints")
    try:
        with caplog.at_level(logging.WARNING, logger="scheduling.teams.quotas"):
            for n in range(5):
                endpoint_create(team=team, name=f"e{n}")
        assert [r.getMessage() for r in caplog.records] == ["team billing uses 4 of its 5 endpoints (80 %)"]
        with pytest.raises(QuotaExceeded, match="team billing has 5 endpoints of its quota of 5"):
            endpoint_create(team=team, name="e5")
    finally:
        for endpoint in Endpoint.objects.all():
            amqp.delete_queue(endpoint.queue)
    assert Endpoint.objects.filter(team=team).count() == 5
    assert quota_refusals("billing", "endpoints") == before + 1
    assert REGISTRY.get_sample_value("delay_team_quota_usage_ratio", {"team": "billing", "quota": "endpoints"}) == 1.2


def test_messages_in_flight_past_the_quota_are_refused_whole(team, versions):
    team_update(team=team, max_in_flight=10)
    team_forget_counts()
    endpoint = Endpoint.objects.create(team=team, name="e", queue="billing--e", topology=versions["v3"])
    caller = Caller(name="k", roles={team.pk: "admin"}, person=False)

    def items(n):
        return [{"endpoint": "e", "payload": i, "delay": 600} for i in range(n)]

    message_schedule_many(items=items(8), caller=caller)
    with pytest.raises(QuotaExceeded, match="team billing has 8 messages in flight of its quota of 10"):
        message_schedule_many(items=items(3), caller=caller)
    assert ScheduledMessage.objects.filter(endpoint=endpoint).count() == 8
    message_schedule_many(items=items(2), caller=caller)
    ScheduledMessage.objects.filter(endpoint=endpoint).update(status="delivered")  # finished: no longer in flight
    team_forget_counts()
    message_schedule_many(items=items(10), caller=caller)
    assert ScheduledMessage.objects.filter(endpoint=endpoint).count() == 20


def test_a_team_s_rates_and_networks_are_checked_when_an_operator_sets_them(team):
    with pytest.raises(ValidationError) as refused:
        team_update(team=team, api_rate="fast", webhook_allowed_networks="10.0.0.0/8\nnot-a-network")
    assert set(refused.value.message_dict) == {"api_rate", "webhook_allowed_networks"}
    team_update(team=team, api_rate="100/second", webhook_allowed_networks="10.1.0.0/16, 10.2.0.0/16")
    assert Team.objects.get(pk=team.pk).api_rate == "100/second"


def test_teams_and_their_changes_are_audited(team, audit_as_command):
    with audit_as_command():
        team_update(team=team, max_schedules=7, celery_task_allowlist="billing.tasks.*")
    (row,) = AuditEvent.objects.filter(action="team.update")
    assert row.before == {"max_schedules": None, "celery_task_allowlist": ""}
    assert row.after == {"max_schedules": 7, "celery_task_allowlist": "billing.tasks.*"}
    assert row.source == "command" and row.actor.startswith("command test") and row.team_name == "billing"


@pytest.fixture
def audit_as_command():
    """A context a command's run would give (outside one, the platform's own work is not audited)."""
    from scheduling.audit.context import AuditContext, audited
    from scheduling.core.caller import caller_for_command

    return lambda: audited(AuditContext(source="command", caller=caller_for_command("test (pytest)")))


def test_the_platform_s_own_work_is_not_audited(team):
    team_update(team=team, max_schedules=9)
    assert not AuditEvent.objects.exists()


def test_a_key_made_with_a_person_s_key_is_checked_in_the_same_query(team, django_user_model,
                                                                      django_assert_num_queries):
    """The parent (and its person) come with the key's own lookup: no query more per request."""
    person = django_user_model.objects.create_user("minter", password="pw")
    parent = api_key_create(user=person)
    child = api_key_create(team=team, scopes=["read"], parent=parent.row)
    plain = api_key_create(team=team, scopes=["read"])
    for made in (child, plain):
        api_key_authenticate(key=made.key)  # its last use written: the next lookups only read
        with django_assert_num_queries(1):
            assert api_key_authenticate(key=made.key)[0].pk == made.row.pk
    api_key_revoke(key=parent.row)
    assert api_key_authenticate(key=child.key) == (None, "this key was revoked")  # revoked with its parent
    ApiKey.objects.filter(pk=child.row.pk).update(revoked_at=None)  # as if only the parent's row changed
    assert api_key_authenticate(key=child.key) == (None, "the key this key was made with is no longer valid")

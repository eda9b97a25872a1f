"""audit/services.py in the real database: a row is written only inside an edge's context, in the
transaction of the change (rolled back with it), naming who, the team and the object; secrets and
URLs' secrets never reach a row; an update's row names only what changed."""

import pytest
from django.db import transaction

from scheduling.audit import actions
from scheduling.audit.context import AuditContext, audited
from scheduling.audit.services import REDACTED, audit_changed, audit_record, audit_values
from scheduling.core.caller import Caller
from scheduling.models import AuditEvent, Team

pytestmark = pytest.mark.django_db
COMMAND = AuditContext(source=AuditEvent.Source.COMMAND, caller=Caller(name="command create_team", user_id=7,
                                                                       key_prefix="dpk_AbCd"),
                       ip="192.0.2.1", user_agent="pytest", request_id="req-1")


def test_outside_an_edge_nothing_is_written():
    """The platform's own work (beat, the delivery loop) is not audited."""
    team = Team.objects.create(name="quiet")
    assert audit_record(action=actions.KEY_CREATE, obj=team, team=team) is None
    assert AuditEvent.objects.count() == 0


def test_a_row_names_who_the_team_the_object_and_the_request():
    team = Team.objects.create(name="billing")
    with audited(COMMAND):
        event = audit_record(action=actions.KEY_CREATE, obj=team, team=team, extra={"scopes": {"all"}})
    row = AuditEvent.objects.get()
    assert row.pk == event.pk
    assert (row.source, row.actor, row.user_id, row.key_prefix) == ("command", "command create_team", 7, "dpk_AbCd")
    assert (row.team_id, row.team_name, row.action) == (team.pk, "billing", "key.create")
    assert (row.object_type, row.object_id, row.object_repr) == ("team", str(team.pk), str(team))
    assert (row.ip, row.user_agent, row.request_id) == ("192.0.2.1", "pytest", "req-1")
    assert row.extra == {"scopes": ["all"]}  # a set stored as JSON


def test_a_row_rolls_back_with_its_change():
    with audited(COMMAND), pytest.raises(RuntimeError), transaction.atomic():
        team = Team.objects.create(name="gone")
        audit_record(action=actions.MEMBER_ADD, obj=team, team=team)
        raise RuntimeError("the change fails")
    assert not Team.objects.filter(name="gone").exists()
    assert AuditEvent.objects.count() == 0


def test_secrets_are_redacted_and_a_set_secret_is_told_from_an_empty_one(endpoint_of):
    endpoint = endpoint_of(handler="webhook", handler_target="https://user:pw@hooks.example/in?token=s3cr3t",
                           webhook_secret="whsec")
    values = audit_values(obj=endpoint)
    assert values["webhook_secret"] == REDACTED
    assert values["webhook_secret_previous"] == ""
    assert values["handler_target"] == "https://***@hooks.example/in?token=***"
    assert values["team"] == endpoint.team_id  # foreign keys as their ids
    assert audit_values(obj=endpoint, fields={"name"}) == {"name": endpoint.name}


def test_a_services_own_values_are_redacted_too():
    """A service may build before/after itself: the URL fields are masked whoever built them."""
    with audited(COMMAND):
        audit_record(action=actions.NOTIFICATION_ROUTE_CREATE, object_type="route", object_id="1",
                     after={"url": "https://hooks.example/?key=abc", "name": "ops"})
    assert AuditEvent.objects.get().after == {"url": "https://hooks.example/?key=***", "name": "ops"}


def test_an_update_names_only_what_changed_never_the_saves_own_stamp():
    before = {"name": "a", "max_concurrent": 1, "updated_at": "t0", "paused": False}
    after = {"name": "a", "max_concurrent": 4, "updated_at": "t1", "paused": True}
    assert audit_changed(before=before, after=after) == (
        {"max_concurrent": 1, "paused": False}, {"max_concurrent": 4, "paused": True})
    assert audit_changed(before=before, after=before) == ({}, {})


def test_long_names_are_cut_to_their_columns():
    with audited(AuditContext(source=AuditEvent.Source.COMMAND, caller=Caller(name="x" * 300))):
        audit_record(action=actions.ORPHAN_COPY_DELETE, object_type="orphan_copy", object_id="9" * 150,
                     object_repr="r" * 300)
    row = AuditEvent.objects.get()
    assert (len(row.actor), len(row.object_id), len(row.object_repr)) == (200, 100, 200)

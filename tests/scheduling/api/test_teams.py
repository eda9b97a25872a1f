"""Two teams on one platform, through the API: each has its own `billing` and its own queue, and
with B's key every object of A is a 404 or absent from lists, whatever B tries (read, rotate,
reschedule, cancel, bulk cancel over all time, schedule to A's endpoint, take over A's schedule key
or idempotency key). The e2e tests deliver through both queues with a real worker."""

import pytest

from scheduling.config.conf import broker
from scheduling.models import ApiKey, AuditEvent, Endpoint, Schedule, ScheduledMessage, Team

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
Status = ScheduledMessage.Status


def schedule(key, **fields):
    return key.post("/api/messages/", {"endpoint": "billing", "payload": {"n": 1}, "delay_seconds": 600, **fields},
                    format="json")


def test_each_team_s_billing_has_its_own_queue(teams):
    a, b = (teams[t].get("/api/endpoints/billing/").json() for t in "ab")
    assert a["queue"] != b["queue"] and a["queue"] == f"{a['team']}--billing" and b["queue"] == f"{b['team']}--billing"
    bound = {x["destination"] for x in broker().management.bindings(broker().vhost) if x["source"] == "dp.v3.delay-delivery"}
    assert {a["queue"], b["queue"]} <= bound
    assert [e["team"] for e in teams["a"].get("/api/endpoints/").json()["results"]] == [a["team"]]


def test_b_reads_nothing_of_a(teams):
    a, b = teams["a"], teams["b"]
    mine = schedule(a).json()["id"]
    theirs = schedule(b).json()["id"]
    assert b.get(f"/api/messages/{mine}/").status_code == 404
    assert [m["id"] for m in b.get("/api/messages/").json()["results"]] == [theirs]
    assert b.get("/api/messages/?endpoint=billing").json()["results"][0]["id"] == theirs
    assert b.get(f"/api/endpoints/billing/?team={a.key.row.team.name}").status_code == 404
    assert b.get(f"/api/messages/?team={a.key.row.team.name}").status_code == 400  # not one of b's teams
    assert b.get(f"/api/teams/{a.key.row.team.name}/").status_code == 404
    assert [t["name"] for t in b.get("/api/teams/").json()["results"]] == [b.key.row.team.name]
    audit = b.get("/api/audit/").json()["results"]
    assert audit and {row["team"] for row in audit} == {b.key.row.team.name}


def test_b_changes_nothing_of_a(teams):
    a, b = teams["a"], teams["b"]
    mine = schedule(a).json()["id"]
    before = Endpoint.objects.get(team=a.key.row.team).webhook_secret
    assert b.post(f"/api/messages/{mine}/cancel/").status_code == 404
    assert b.patch(f"/api/messages/{mine}/", {"delay_seconds": 5}, format="json").status_code == 404
    assert b.post(f"/api/messages/{mine}/republish/").status_code == 404
    assert b.post(f"/api/endpoints/billing/rotate-secret/?team={a.key.row.team.name}", {}, format="json") \
        .status_code == 404
    assert ScheduledMessage.objects.get(id=mine).status == Status.PUBLISHED
    assert Endpoint.objects.get(team=a.key.row.team).webhook_secret == before


def test_b_s_bulk_cancel_over_all_time_counts_and_cancels_only_b_s(teams, django_capture_on_commit_callbacks):
    from scheduling.celery.tasks import apply_bulk_action

    a, b = teams["a"], teams["b"]
    mine = [schedule(a).json()["id"] for _ in range(3)]
    theirs = [schedule(b).json()["id"] for _ in range(2)]
    everything = {"created_after": "1970-01-01T00:00:00Z"}
    assert b.post("/api/messages/cancel/", {**everything, "dry_run": True}, format="json").json() == \
        {"count": 2, "exact": True}
    with django_capture_on_commit_callbacks(execute=False):
        job = b.post("/api/messages/cancel/", everything, format="json").json()
    assert (job["count"], job["team"]) == (2, b.key.row.team.name)
    apply_bulk_action(job["id"])  # as the worker would
    assert b.get(job["status_url"]).json()["done"] == 2
    assert a.get(job["status_url"]).status_code == 404  # another team's job: as if none
    assert job["id"] not in [j["id"] for j in a.get("/api/bulk-actions/").json()["results"]]
    assert set(ScheduledMessage.objects.filter(id__in=theirs).values_list("status", flat=True)) == {Status.CANCELLED}
    assert set(ScheduledMessage.objects.filter(id__in=mine).values_list("status", flat=True)) == {Status.PUBLISHED}
    named = b.post("/api/messages/cancel/", {**everything, "team": a.key.row.team.name}, format="json")
    assert named.status_code == 400 and "team" in named.json()


def test_b_cannot_send_to_a_s_endpoint_nor_as_a(teams):
    a, b = teams["a"], teams["b"]
    refused = schedule(b, team=a.key.row.team.name)
    assert refused.status_code == 400 and "unknown endpoint 'billing' in team" in refused.json()["endpoint"][0]
    made = schedule(b).json()
    assert made["team"] == b.key.row.team.name  # b's own billing, never a's
    assert not ScheduledMessage.objects.filter(endpoint__team=a.key.row.team).exists()


def test_the_same_idempotency_key_and_schedule_key_are_each_team_s_own(teams):
    a, b = teams["a"], teams["b"]
    first = schedule(a, idempotency_key="invoice-42")
    again = schedule(b, idempotency_key="invoice-42")
    assert first.status_code == again.status_code == 201 and first.json()["id"] != again.json()["id"]
    body = {"key": "nightly", "endpoint": "billing", "payload": {"report": 1}, "interval_seconds": 3600}
    assert a.post("/api/schedules/", body, format="json").status_code == 201
    taken = b.post("/api/schedules/", {**body, "payload": {"stolen": True}}, format="json")
    assert taken.status_code == 201  # b's own schedule of that key, not an update of a's
    assert Schedule.objects.get(team=a.key.row.team, key="nightly").payload == {"report": 1}
    assert b.post("/api/schedules/nightly/pause/").json()["team"] == b.key.row.team.name
    assert not Schedule.objects.get(team=a.key.row.team, key="nightly").is_paused
    assert b.delete("/api/schedules/nightly/").status_code == 204
    assert Schedule.objects.filter(team=a.key.row.team, key="nightly").exists()
    assert ScheduledMessage.objects.filter(endpoint__team=a.key.row.team, schedule="nightly",
                                           status=Status.PUBLISHED).exists()  # a's runs untouched


def test_a_member_of_both_names_the_team_and_sees_both(teams, api_as):
    a_team, b_team = teams["a"].key.row.team, teams["b"].key.row.team
    both = api_as("member", team=a_team.name)
    Team.objects.get(pk=b_team.pk).memberships.create(user=both.user, role="viewer")
    ambiguous = both.get("/api/endpoints/billing/")
    assert ambiguous.status_code == 400 and "team" in ambiguous.json()
    assert both.get(f"/api/endpoints/billing/?team={b_team.name}").json()["team"] == b_team.name
    assert len(both.get("/api/endpoints/").json()["results"]) == 2
    assert schedule(both).status_code == 201  # a member in a only: the endpoint is a's
    assert schedule(both, team=b_team.name).status_code == 400  # a viewer in b cannot send there


def test_keys_are_made_listed_and_revoked_by_team_admins_only(teams, api_as):
    team = teams["a"].key.row.team
    admin, member = api_as("admin", team=team.name), api_as("member", team=team.name)
    made = admin.post("/api/keys/", {"scopes": ["read"], "name": "reports"}, format="json")
    assert made.status_code == 201 and made.json()["key"].startswith("dpk_")
    key = made.json()["key"]
    assert key not in admin.get("/api/keys/").content.decode()  # shown once
    assert {k["prefix"] for k in admin.get("/api/keys/").json()["results"]} >= {made.json()["prefix"]}
    assert member.get("/api/keys/").status_code == 403 and member.post("/api/keys/", {"scopes": ["read"]},
                                                                        format="json").status_code == 403
    assert teams["a"].post("/api/keys/", {"scopes": ["all"]}, format="json").status_code == 403  # a key makes none
    assert teams["b"].post(f"/api/keys/{made.json()['prefix']}/revoke/").status_code == 403
    assert admin.post(f"/api/keys/{made.json()['prefix']}/revoke/").status_code == 200
    assert ApiKey.objects.get(prefix=made.json()["prefix"]).revoked_at is not None


def test_members_are_managed_by_team_admins(teams, api_as, django_user_model):
    team = teams["a"].key.row.team
    admin, viewer = api_as("admin", team=team.name), api_as("viewer", team=team.name)
    newcomer = django_user_model.objects.create_user("newcomer", password="pw")
    url = f"/api/teams/{team.name}/members/"
    invite = {"username": "newcomer", "role": "member"}
    assert viewer.post(f"/api/teams/{team.name}/invitations/", invite, format="json").status_code == 403
    assert admin.post(url + "set/", invite, format="json").status_code == 400  # joining is the newcomer's choice
    assert admin.post(f"/api/teams/{team.name}/invitations/", invite, format="json").status_code == 202
    from rest_framework.test import APIClient

    newcomers = APIClient()
    newcomers.force_authenticate(newcomer)
    assert newcomers.post(f"/api/invitations/{team.invitations.get().pk}/accept/").status_code == 200
    assert {m["username"]: m["role"] for m in viewer.get(url).json()}["newcomer"] == "member"
    assert teams["b"].get(url).status_code == 404
    assert admin.post(url + "remove/", {"username": "newcomer"}, format="json").status_code == 204
    assert not team.memberships.filter(user=newcomer).exists()
    actions = list(AuditEvent.objects.filter(team_id=team.pk, action__startswith="member.").values_list("action", flat=True))
    assert sorted(actions) == ["member.add", "member.remove"]

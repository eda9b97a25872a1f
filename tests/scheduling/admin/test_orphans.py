"""The orphan copies' pages: a team's staff see their team's copies (read-only: no action, no add,
no delete, whatever their role), another team's copy is not found for them; operators see every
copy, those of a queue no endpoint has included, and delete the ones decided on after a
confirmation, each audited."""

import uuid

import pytest
from django.urls import reverse

from scheduling.delivery.orphans import Carried, orphan_copy_set_aside
from scheduling.models import Endpoint, OrphanCopy, Team

pytestmark = pytest.mark.django_db
LIST = reverse("admin:scheduling_orphancopy_changelist")


@pytest.fixture
def copies(versions):
    """One copy set aside on each of: the default team's endpoint, another team's, no endpoint's."""
    made = {}
    for team_name in ("default", f"other-{uuid.uuid4().hex[:6]}"):
        team = Team.objects.get_or_create(name=team_name)[0]
        endpoint = Endpoint.objects.create(team=team, name="orders", queue=f"{team.name}--orders",
                                           topology=versions["v3"])
        made[team_name if team_name == "default" else "other"] = endpoint.queue
    made["none"] = "gone--queue"
    ids = {key: str(uuid.uuid4()) for key in made}
    orphan_copy_set_aside(copies=[Carried(ids[key], 0, queue, 1_900_000_000_000, {"task": "scheduling.deliver"})
                                  for key, queue in made.items()])
    return {key: OrphanCopy.objects.get(message_id=ids[key]) for key in made}


def left(copies) -> list[int]:
    """Which of the fixture's copies are still kept (the table may hold others' copies)."""
    return list(OrphanCopy.objects.filter(pk__in=[c.pk for c in copies.values()]).order_by("pk")
                .values_list("pk", flat=True))


def test_a_team_s_staff_see_their_team_s_copies_only(staff_client, copies):
    client = staff_client("viewer")
    page = client.get(LIST).content.decode()
    assert copies["default"].message_id in page
    assert copies["other"].message_id not in page and copies["none"].message_id not in page
    mine = client.get(reverse("admin:scheduling_orphancopy_change", args=[copies["default"].pk]))
    assert mine.status_code == 200 and "default--orders" in mine.content.decode()
    theirs = client.get(reverse("admin:scheduling_orphancopy_change", args=[copies["other"].pk]))
    assert theirs.status_code == 302 and theirs.url == reverse("admin:index")  # not found, as Django says it
    assert 'name="action"' not in page and "addlink" not in page
    assert client.post(reverse("admin:scheduling_orphancopy_delete", args=[copies["default"].pk]),
                       {"post": "yes"}).status_code == 403
    assert len(left(copies)) == 3


def test_operators_see_every_copy(admin_client, copies):
    page = admin_client.get(LIST).content.decode()
    assert all(copy.message_id in page for copy in copies.values())


def test_an_operator_deletes_copies_after_confirming_each_audited(admin_client, copies):
    """Django's delete with its confirmation page: nothing goes before "yes"; then each copy goes
    with one audit row (orphan_copy.delete, its team, what it named), and the others stay."""
    from scheduling.audit import actions
    from scheduling.models import AuditEvent

    chosen = [copies["default"], copies["none"]]
    form = {"action": "delete_selected", "_selected_action": [c.pk for c in chosen]}
    asked = admin_client.post(LIST, form)
    assert asked.status_code == 200 and "Are you sure" in asked.content.decode()
    assert all(c.message_id in asked.content.decode() for c in chosen)
    assert len(left(copies)) == 3 and not AuditEvent.objects.filter(action=actions.ORPHAN_COPY_DELETE)
    done = admin_client.post(LIST, {**form, "post": "yes"})
    assert done.status_code == 302
    assert left(copies) == [copies["other"].pk]
    audited = AuditEvent.objects.filter(action=actions.ORPHAN_COPY_DELETE).order_by("object_id")
    assert [(a.source, a.object_id, a.team_id, a.before["message_id"], a.before["queue"]) for a in audited] == sorted(
        [("admin", str(c.pk), c.team_id, c.message_id, c.queue) for c in chosen], key=lambda row: row[1])
    assert all("body" not in a.before and "headers" not in a.before for a in audited)


def test_an_operator_deletes_one_copy_from_its_page_audited(admin_client, copies):
    from scheduling.audit import actions
    from scheduling.models import AuditEvent

    url = reverse("admin:scheduling_orphancopy_delete", args=[copies["other"].pk])
    assert "Are you sure" in admin_client.get(url).content.decode()
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    assert left(copies) == sorted([copies["default"].pk, copies["none"].pk])
    event = AuditEvent.objects.get(action=actions.ORPHAN_COPY_DELETE)
    assert (event.object_id, event.team_id) == (str(copies["other"].pk), copies["other"].team_id)


@pytest.mark.parametrize("role", ["viewer", "member", "admin"])
def test_a_team_s_members_may_not_delete_even_their_team_s_copies(staff_client, copies, role):
    client = staff_client(role)
    page = client.get(LIST).content.decode()
    assert "delete_selected" not in page
    mine = copies["default"].pk
    assert client.post(LIST, {"action": "delete_selected", "_selected_action": [mine], "post": "yes"}).status_code == 403
    assert client.post(reverse("admin:scheduling_orphancopy_delete", args=[mine]), {"post": "yes"}).status_code == 403
    assert len(left(copies)) == 3

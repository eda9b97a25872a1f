"""The orphan copies' pages: a team's staff see their team's copies (read-only: no action, no add,
no delete), another team's copy is not found for them; operators see every copy, those of a queue no
endpoint has included."""

import uuid

import pytest
from django.urls import reverse

from scheduling.delivery.orphans import Carried, orphan_copy_set_aside
from scheduling.models import Endpoint, OrphanCopy
from scheduling.teams.models import Team

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
    assert OrphanCopy.objects.count() == 3


def test_operators_see_every_copy(admin_client, copies):
    page = admin_client.get(LIST).content.decode()
    assert all(copy.message_id in page for copy in copies.values())

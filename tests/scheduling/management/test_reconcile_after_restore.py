"""reconcile_after_restore: a report whatever it finds, the orphan copies exported as JSON lines
(a team's alone when asked), and bad input refused in one line before anything is done."""

import io
import json
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduling.delivery.orphans import Carried, orphan_copy_set_aside
from scheduling.models import Endpoint, Team

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = io.StringIO()
    call_command("reconcile_after_restore", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.parametrize(("args", "says"), [
    (["--overdue-after", "soon"], "--overdue-after must be a duration such as 90s"),
    (["--batch", "0"], "--batch must be 1 or more, not 0"),
    (["--orphans-since", "yesterday"], "--orphans-since must be an ISO time with its offset"),
    (["--orphans-since", "2026-11-28T23:00:00"], "--orphans-since must be an ISO time with its offset"),
    (["--team", "no-such-team"], "no team 'no-such-team'"),
    (["--dry-run", "--export-orphans", "/no/such/dir/x.jsonl"], "cannot write /no/such/dir/x.jsonl"),
])
def test_bad_input_is_one_line(args, says):
    with pytest.raises(CommandError) as raised:
        run(*args)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_a_dry_run_reports_and_exports_the_orphans(versions, tmp_path):
    team = Team.objects.create(name=f"t-{uuid.uuid4().hex[:8]}")
    endpoint = Endpoint.objects.create(team=team, name="orders", queue=f"{team.name}--orders", topology=versions["v3"])
    ids = [str(uuid.uuid4()) for _ in range(3)]
    orphan_copy_set_aside(copies=[Carried(i, 0, endpoint.queue, 1_900_000_000_000, {"task": "scheduling.deliver"},
                                          f'[["{i}"],{{}},{{}}]') for i in ids])
    target = tmp_path / "orphans.jsonl"
    printed = run("--dry-run", "--export-orphans", str(target), "--team", team.name,
                  "--orphans-since", "2000-01-01T00:00:00Z")
    assert "dry run: reconciled" in printed and "would be published again" in printed
    assert "orphans               3 copies with no row" in printed
    assert f"exported 3 orphan copies to {target}" in printed
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert sorted(r["message_id"] for r in lines) == sorted(ids)
    assert {(r["team"], r["endpoint"], r["queue"], r["due_at"]) for r in lines} == {
        (team.name, "orders", endpoint.queue, "2030-03-17T17:46:40Z")}

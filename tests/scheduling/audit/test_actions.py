"""Audit actions are names declared once (scheduling/audit/actions.py): every ``audit_record``
call site says its action by name, never as a literal or an f-string; the actions built from a
kind or a command's name are declared for each one there is; the docs list only declared ones."""

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import scheduling.management.commands as commands
from harness.paths import ROOT
from scheduling.audit import actions
from scheduling.audit.selectors import TRAFFIC_ACTIONS
from scheduling.management.commands._base import PlatformCommand
from scheduling.models import BulkAction


def literal_actions(source: str) -> list[str]:
    """The ``action=`` arguments of audit_record calls in ``source`` that spell a string: a
    constant or an f-string anywhere in the expression (``"a" if x else "b"`` too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "audit_record":
            for keyword in node.keywords:
                if keyword.arg == "action" and any(
                        isinstance(part, ast.JoinedStr) or (isinstance(part, ast.Constant) and isinstance(part.value, str))
                        for part in ast.walk(keyword.value)):
                    found.append(ast.unparse(keyword.value))
    return found


@pytest.mark.parametrize("source, expected", [
    ('audit_record(action="team.create", obj=team)', ["'team.create'"]),
    ('audit_record(action=f"command.{name}")', ["f'command.{name}'"]),
    ('services.audit_record(action=actions.A if x else "b.c")', ["actions.A if x else 'b.c'"]),
    ('audit_record(action=actions.TEAM_CREATE, obj=team)', []),
    ('audit_record(action=actions.COMMAND_RUN[name])', []),
])
def test_the_check_finds_literals(source, expected):
    assert literal_actions(source) == expected


def test_no_call_site_spells_an_action():
    calls, literals = 0, []
    for path in sorted((ROOT / "scheduling").rglob("*.py")):
        source = path.read_text()
        calls += source.count("audit_record(action=")
        literals += [f"{path.relative_to(ROOT)}: {found}" for found in literal_actions(source)]
    assert calls >= 30  # the check reads the call sites (36 when written)
    assert literals == []


def test_declared_names_are_entity_verb_and_distinct():
    names = {name: value for name, value in vars(actions).items() if name.isupper() and isinstance(value, str)}
    assert len(set(names.values())) == len(names)
    assert all(re.fullmatch(r"[a-z_]+\.[a-z_]+", action) for action in actions.ALL)
    assert set(TRAFFIC_ACTIONS) <= actions.ALL


def test_every_bulk_kind_has_its_action():
    assert set(actions.MESSAGE_BULK) == set(BulkAction.Kind.values)


def test_every_command_that_audits_its_runs_is_declared():
    audited = set()
    for module in pkgutil.iter_modules(commands.__path__):
        command = getattr(importlib.import_module(f"{commands.__name__}.{module.name}"), "Command", None)
        if command is not None and issubclass(command, PlatformCommand) and command.audit_runs:
            audited.add(module.name)
    assert audited == set(actions.COMMAND_RUN)


def _backticked(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+\.[a-z_]+)`", text))


def _section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end != -1 else None]


@pytest.mark.parametrize("path, heading", [
    ("docs/guides/teams.md", "## Invitations"),
    ("docs/guides/teams.md", "## The audit log"),
    ("docs/operations/retention.md", "## The audit log"),
])
def test_the_docs_list_declared_actions(path, heading):
    listed = _backticked(_section(ROOT / path, heading))
    assert listed and listed <= actions.ALL, listed - actions.ALL


def test_the_teams_guide_lists_every_action_there_is():
    """Its table of actions (what GET /api/audit/'s ``action`` filter takes) is the declared set."""
    assert _backticked(_section(ROOT / "docs/guides/teams.md", "## The audit log")) == actions.ALL


def test_the_retention_guide_lists_a_messages_own_events():
    assert _backticked(_section(ROOT / "docs/operations/retention.md", "## The audit log")) >= set(TRAFFIC_ACTIONS)

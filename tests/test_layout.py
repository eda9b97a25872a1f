"""The house rules, read from the import statements (ast, nothing is imported or run):

- broker I/O has one home: kombu, amqp and requests are imported in ``rabbit/`` and nowhere
  else under ``scheduling/`` or ``topology/`` (the Celery app's ``scheduling/celery.py`` aside,
  which builds Celery's own messages; ``handlers.py`` uses requests for webhooks, not the broker);
- ``topology/`` is pure: the standard library and itself only;
- ``selectors.py`` reads the database only: no broker package;
- ``lifecycle.py``, ``backoff.py``, ``holding.py`` and ``wire.py`` do no I/O of their own;
- the write path never imports the Celery tasks that call it (no arrow from services/ to tasks.py).
"""

import ast
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

BROKER_LIBRARIES = {"kombu", "amqp", "requests", "pika"}
STDLIB = set(sys.stdlib_module_names)


def imports(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against its package)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "migrations" not in p.parts)


def top(name: str) -> str:
    return name.split(".")[0]


@pytest.mark.parametrize("path", sources("scheduling", "topology"), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_broker_library_outside_the_broker_package(path):
    allowed = {"scheduling/celery.py": {"kombu"}, "scheduling/handlers.py": {"requests"}}
    used = {top(name) for name in imports(path)} & BROKER_LIBRARIES
    assert used <= allowed.get(str(path.relative_to(ROOT)), set())


@pytest.mark.parametrize("path", sources("topology"), ids=lambda p: str(p.relative_to(ROOT)))
def test_topology_is_pure(path):
    assert {top(name) for name in imports(path)} <= STDLIB | {"topology", "__future__"}


@pytest.mark.parametrize("module", ["selectors", "lifecycle", "backoff", "holding", "wire", "clock"])
def test_reads_and_pure_parts_do_not_reach_the_broker(module):
    names = imports(ROOT / "scheduling" / f"{module}.py")
    assert not {n for n in names if top(n) in BROKER_LIBRARIES or n.endswith(("conf.broker", "rabbit.Broker"))}
    if module != "selectors":
        assert not any(n.startswith(("django.db", "scheduling.services", "scheduling.conf")) for n in names)
    if module in ("lifecycle", "backoff", "clock"):
        assert {top(n) for n in names} <= STDLIB | {"scheduling", "__future__"}


@pytest.mark.parametrize("path", sources("scheduling/services"), ids=lambda p: str(p.relative_to(ROOT)))
def test_services_do_not_import_the_tasks_that_call_them(path):
    assert not {n for n in imports(path) if n == "scheduling.tasks" or n.startswith("scheduling.tasks.")}


def test_the_rules_see_imports():
    """The checks above would pass on files they cannot read: make sure they can."""
    assert "kombu.Connection" in imports(ROOT / "rabbit" / "connection.py")
    assert "scheduling.lifecycle.Status" in imports(ROOT / "scheduling" / "models.py")
    assert "scheduling.services.delivery.delivery_receive" in imports(ROOT / "scheduling" / "tasks.py")

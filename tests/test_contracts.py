"""The layering as import-linter contracts (pyproject.toml, [tool.importlinter]): kept by the code
as it is, and broken by an import against them (shown on a copy of the tree); and no import cycle
between the platform's modules, nor between scheduling's packages (grimp, the graph import-linter reads)."""

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

from harness.paths import ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("topology", "rabbit", "scheduling", "delayplatform", "harness", "bench", "tests")


def lint(where: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=where, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(where)})


def test_every_contract_is_kept():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "Contracts: 8 kept, 0 broken." in result.stdout


def test_an_import_against_the_layers_breaks_them(tmp_path):
    """A pure part that imports the harness and a service: three contracts name it (the parts'
    layers, scheduling's layers, the pure parts'); and a domain that imports one above it (endpoints
    reading the messages' selectors) breaks the domains' order."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    cursors = tmp_path / "scheduling" / "core" / "cursors.py"
    cursors.write_text(cursors.read_text().replace(
        "from __future__ import annotations\n",
        "from __future__ import annotations\n\nimport harness.waiting\nfrom scheduling.messages import services\n", 1))
    endpoints = tmp_path / "scheduling" / "endpoints" / "selectors.py"
    endpoints.write_text(endpoints.read_text().replace(
        "from __future__ import annotations\n",
        "from __future__ import annotations\n\nfrom scheduling.messages.selectors import message_describe_gone\n", 1))
    result = lint(tmp_path)
    assert result.returncode == 1 and "Contracts: 5 kept, 3 broken." in result.stdout, result.stdout[-3000:]
    assert "scheduling.core.cursors -> harness.waiting" in result.stdout
    assert "scheduling.core.cursors -> scheduling.messages.services" in result.stdout
    assert "scheduling.endpoints is not allowed to import scheduling.messages" in result.stdout
    assert "scheduling.endpoints.selectors -> scheduling.messages.selectors" in result.stdout


def cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & modules) for m in modules}
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            for j in range(i, len(edges[node])):
                child = edges[node][j]
                if child not in index:
                    work += [(node, j + 1), (child, 0)]
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return found


def test_no_module_imports_itself_through_others():
    """Imports inside functions and under TYPE_CHECKING count: a lazy import is still a cycle."""
    graph = grimp.build_graph("scheduling", "rabbit", "topology", "delayplatform", cache_dir=None)
    modules = {m for m in graph.modules if ".migrations." not in m}
    assert cycles(graph, modules) == []


def test_the_cycle_check_sees_a_cycle():
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c", "p.d"):
        graph.add_module(module)
    for importer, imported in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.d", "p.a")):
        graph.add_import(importer=importer, imported=imported)
    assert cycles(graph, set(graph.modules)) == [["p.a", "p.b", "p.c"]]


def package_cycles(graph: grimp.ImportGraph, container: str = "scheduling") -> list[list[str]]:
    """Cycles between the packages right under ``container`` (a module at its top level counts as
    one): any import from a module of one to a module of another is an edge between the two."""
    def package(module: str) -> str | None:
        parts = module.split(".")
        return ".".join(parts[:2]) if parts[0] == container and len(parts) > 1 else None

    packages = {p for m in graph.modules if (p := package(m)) and ".migrations" not in p}
    joined = grimp.ImportGraph()
    for name in packages:
        joined.add_module(name)
    for importer in graph.modules:
        if (source := package(importer)) not in packages:
            continue
        for imported in graph.find_modules_directly_imported_by(importer):
            if (target := package(imported)) in packages and target != source:
                joined.add_import(importer=source, imported=target)
    return cycles(joined, packages)


def test_no_package_imports_itself_through_others():
    """The domains form no cycle either: no package of scheduling/ reaches itself through another,
    however deep in either the imports are (lazy ones count)."""
    graph = grimp.build_graph("scheduling", cache_dir=None)
    assert package_cycles(graph) == []


def test_the_package_check_sees_an_upward_import():
    """One import from a lower domain to a higher one (endpoints reading the messages' selectors, as
    the tree stood before the order) is a cycle of the two packages, since messages import endpoints."""
    graph = grimp.build_graph("scheduling", cache_dir=None)
    graph.add_import(importer="scheduling.endpoints.selectors", imported="scheduling.messages.selectors")
    assert ["scheduling.endpoints", "scheduling.messages"] in package_cycles(graph)


def test_the_architecture_page_shows_the_order_the_contract_keeps():
    """docs/architecture.md's order of scheduling's layers is the contract's, layer for layer."""
    block = (ROOT / "docs" / "architecture.md").read_text().split("<!-- order -->")[1]
    shown = [re.split(r"\s{2,}", line.strip())[0] for line in block.splitlines()
             if line.strip() and not line.startswith("```")]
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (inside,) = [c for c in contracts if c.get("containers") == ["scheduling"]]
    assert shown == inside["layers"]
    assert " : " not in " ".join(inside["layers"])  # no layer whose members may import each other freely

"""The dependencies in their sets (requirements/): runtime.txt is what the platform imports and all
the image installs; test.txt, docs.txt and tools.txt add what only the tests, the docs site and the
benchmarks need; requirements.txt includes the four for the developer virtualenv. Each package is
pinned once, with ``==``, and what each part of the code imports comes from its own set."""

import ast
import fnmatch
import re
import shlex
import sys
from collections import Counter
from importlib.metadata import packages_distributions, requires

import pytest
from packaging.requirements import Requirement

from harness.paths import ROOT

SETS = ROOT / "requirements"
FILES = sorted(path.name for path in SETS.glob("*.txt"))
PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<extras>\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!-]+")
INCLUDE = re.compile(r"-r (?P<file>\S+)")
# never in the image: test runners and their plugins, browsers, fuzzers, the docs site, profilers
NOT_RUNTIME = ("pytest*", "selenium", "schemathesis", "hypothesis", "mkdocs*", "py-spy", "build")
LOCAL = {path.name for path in ROOT.iterdir() if (path / "__init__.py").is_file()}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lines(path) -> list[str]:
    stripped = (line.strip() for line in path.read_text().splitlines())
    return [line for line in stripped if line and not line.startswith("#")]


def pins(file: str) -> dict[str, Requirement]:
    """The file's own pins (not those it includes), by canonical name."""
    found = {}
    for line in lines(SETS / file):
        if not INCLUDE.fullmatch(line):
            requirement = Requirement(line)
            found[canonical(requirement.name)] = requirement
    return found


def included(path) -> list[str]:
    return [INCLUDE.fullmatch(line)["file"] for line in lines(path) if INCLUDE.fullmatch(line)]


def test_the_sets_are_runtime_test_docs_and_tools():
    assert FILES == ["docs.txt", "runtime.txt", "test.txt", "tools.txt"]
    assert included(SETS / "runtime.txt") == [] and included(SETS / "docs.txt") == []
    assert included(SETS / "test.txt") == ["runtime.txt"] and included(SETS / "tools.txt") == ["runtime.txt"]


@pytest.mark.parametrize("file", FILES)
def test_every_line_is_an_exact_pin_or_an_include(file):
    for line in lines(SETS / file):
        assert PIN.fullmatch(line) or INCLUDE.fullmatch(line), f"{file}: {line!r} is not pinned with =="


def test_each_package_is_pinned_in_one_set_only():
    counts = Counter(name for file in FILES for name in pins(file))
    assert not {name: n for name, n in counts.items() if n > 1}


def test_the_developer_file_includes_every_set_and_pins_nothing_itself():
    assert all(INCLUDE.fullmatch(line) for line in lines(ROOT / "requirements.txt"))
    assert sorted(included(ROOT / "requirements.txt")) == [f"requirements/{file}" for file in FILES]


def test_the_runtime_set_has_no_test_docs_or_tools_package():
    assert not [name for name in pins("runtime.txt") if any(fnmatch.fnmatch(name, p) for p in NOT_RUNTIME)]


def docker_instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_image_installs_the_runtime_set_only():
    installs = []
    for instruction in docker_instructions():
        words = shlex.split(instruction)
        if words[0] == "COPY" and any("requirements" in word for word in words[1:-1]):
            assert words[1:-1] == ["requirements/runtime.txt"], instruction
        if "pip" in words and "install" in words:
            args = words[words.index("install") + 1:]
            files = [args[i + 1] for i, arg in enumerate(args) if arg in ("-r", "--requirement")]
            packages = [arg for i, arg in enumerate(args)
                        if not arg.startswith("-") and args[i - 1] not in ("-r", "--requirement")]
            assert not packages, f"the image installs a package that is in no set: {instruction}"
            installs += files
    assert installs == ["requirements/runtime.txt"]


def installed_with(files: list[str]) -> set[str]:
    """Every distribution that installing these sets brings: their pins and what those require,
    as this virtualenv's metadata says (markers evaluated, the extras a pin asks for included)."""
    pending = [requirement for file in files for requirement in pins(file).values()]
    seen: set[str] = set()
    while pending:
        requirement = pending.pop()
        name = canonical(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        for line in requires(requirement.name) or []:
            needed = Requirement(line)
            extras = requirement.extras | {""}
            if not needed.marker or any(needed.marker.evaluate({"extra": extra}) for extra in extras):
                pending.append(needed)
    return seen


def imported_distributions(*folders: str) -> dict[str, str]:
    """The third-party distributions these folders import (at any depth, lazily or not), each
    with one file that imports it."""
    distributions = packages_distributions()
    found = {}
    for folder in folders:
        path = ROOT / folder
        for source in [path] if path.is_file() else sorted(path.rglob("*.py")):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top in sys.stdlib_module_names or top in LOCAL or top == "__future__":
                        continue
                    where = source.relative_to(ROOT)
                    assert top in distributions, f"{where}: {top} is installed by no package"
                    for distribution in distributions[top]:
                        found.setdefault(canonical(distribution), str(where))
    return found


@pytest.mark.parametrize("folders, files", [
    (("scheduling", "delayplatform", "rabbit", "topology", "manage.py", "gunicorn.conf.py"), ["runtime.txt"]),
    (("bench",), ["runtime.txt", "tools.txt"]),
    (("tests", "harness"), ["runtime.txt", "test.txt"]),
], ids=["platform", "bench", "tests"])
def test_what_each_part_imports_comes_with_its_sets(folders, files):
    """A package pinned in another set would be missing where only these are installed (the
    image: runtime.txt); one pinned nowhere must come as a dependency of these sets' pins."""
    everywhere = {name: file for file in FILES for name in pins(file)}
    brought = installed_with(files)
    for distribution, source in imported_distributions(*folders).items():
        if distribution in everywhere:
            pinned_in = everywhere[distribution]
            assert pinned_in in files, f"{source} imports {distribution}, pinned in {pinned_in}"
        else:
            assert distribution in brought, f"{source} imports {distribution}: nothing in {files} installs it"


def test_the_image_leaves_out_what_runs_beside_the_platform():
    """COPY . . takes the build context: the tests, benchmarks, harness, client and docs stay out."""
    ignored = {line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {"tests", "bench", "harness", "clients", "docs", ".venv", ".env"} <= ignored
    assert not {"scheduling", "delayplatform", "rabbit", "topology", "requirements"} & ignored

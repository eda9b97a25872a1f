"""The house rules import-linter cannot state (the layering itself is contracts in pyproject.toml,
run by tests/test_contracts.py), read from the import statements and definitions (ast, nothing is
imported or run); docs/architecture.md explains them:

- ``topology/`` is pure: the standard library and itself only;
- the database's selectors read the database only: not even the broker that ``conf`` names;
- ``scheduling/core/`` is the standard library and itself only; the other pure parts
  (``worker/holding.py``, ``delivery/pushback.py``, ``core/schedule_rules.py``, ``messages/wire.py``,
  ``teams/``' keys, queues, roles and caller) import no ``django.db``;
- what settings.py and gunicorn.conf.py import before Django is set up is the standard library
  only, through packages whose ``__init__`` imports nothing;
- ``scheduling/``'s top level holds ``apps.py`` only, the rest is in a domain's
  or an edge's folder, and docs/architecture.md names every package and module;
- services and selectors: every public function keyword-only and named ``<entity>_<verb>``, and
  imported by name from its module (``from scheduling.messages.services import message_schedule``,
  never the module whole); the domains' ``__init__.py`` re-export nothing.
- each setting is declared once (scheduling/config/specs.py): no other module of the platform
  spells a ``DELAY_*`` name, in code or in a string (docstrings and comments may name them), and
  every environment variable the platform reads is declared there.
- nothing in bench/, tests/ or harness/ edits ``sys.path`` (the repository root is on it: pytest's
  rootdir, ``python -m bench.<name>``).
"""

import ast
import re
import sys
from pathlib import Path

import pytest

from harness.paths import ROOT

BROKER_LIBRARIES = {"kombu", "amqp", "requests", "pika"}
STDLIB = set(sys.stdlib_module_names)
SCHEDULING = ROOT / "scheduling"
TOP_LEVEL = ["__init__.py", "apps.py"]
# What services and selectors act on or read: a public function is named <entity>_<verb>[_<what>].
ENTITIES = ("message", "message_table", "endpoint", "webhook_call", "topology", "topology_version", "delays", "delivery",
            "delivery_minute", "delivery_log", "relay", "timeout", "unroutable", "retention", "archive",
            "archive_file", "accuracy_report", "celery_task", "celery_queue", "dashboard", "lateness", "outbox",
            "queryset", "cursor", "schedule", "team", "membership", "invitation", "api_key", "caller", "audit",
            "orphan_copy", "subscription", "event", "notification", "notification_route")


def imports(path: Path, *, on_import: bool = False) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against its package);
    ``on_import``: only those its import runs (not the ones inside functions)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    found = set()
    for node in (statements_run_on_import if on_import else ast.walk)(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def statements_run_on_import(tree: ast.AST):
    """The nodes a module's import executes: everything but the bodies of its functions."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo += [child for child in ast.iter_child_nodes(node)
                 if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "migrations" not in p.parts)


def top(name: str) -> str:
    return name.split(".")[0]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# The write path beside the domains' services.py (the contracts in pyproject.toml list the same).
WRITES = ["endpoints/secrets.py", "messages/bulk.py", "messages/inputs.py", "messages/relay.py",
          "messages/batches.py", "messages/claims.py", "messages/gathering.py", "messages/rescue.py",
          "messages/unroutable.py", "moves/delays.py", "moves/timeouts.py", "delivery/flow_slots.py",
          "delivery/webhook_calls.py", "delivery/log.py", "delivery/minutes.py", "delivery/orphans.py",
          "moves/restore.py"]
READS = ["db/counts.py", "messages/dashboard.py", "reports/facts.py", "versions/broker.py"]


def service_modules() -> list[Path]:
    """The write path: each domain's services.py and the modules above."""
    return sorted([*SCHEDULING.glob("*/services.py"), *(SCHEDULING / name for name in WRITES)])


def selector_modules() -> list[Path]:
    """The reads: each domain's selectors.py and the modules above."""
    return sorted([*SCHEDULING.glob("*/selectors.py"), *(SCHEDULING / name for name in READS)])


def database_selectors() -> list[Path]:
    return [p for p in selector_modules() if p.name != "broker.py"]


@pytest.mark.parametrize("path", sorted((SCHEDULING / "reports").glob("*.py")), ids=rel)
def test_the_spark_jobs_folder_shadows_no_standard_module(path):
    """spark-submit runs reports/accuracy.py as a script, so its folder comes first on sys.path: a
    reports/selectors.py there once replaced the standard library's (subprocess failed to import)."""
    assert path.stem not in STDLIB


@pytest.mark.parametrize("path", sources("topology"), ids=rel)
def test_topology_is_pure(path):
    assert {top(name) for name in imports(path)} <= STDLIB | {"topology", "__future__"}


@pytest.mark.parametrize("path", database_selectors(), ids=rel)
def test_the_databases_selectors_do_not_reach_the_broker(path):
    names = imports(path)
    assert not {n for n in names if top(n) in BROKER_LIBRARIES or top(n) == "rabbit"
                or n.endswith(("conf.broker", "rabbit.Broker")) or n.startswith("scheduling.versions.broker")}


# The core's one reach past the standard library: the schedules' rules parse cron with cronsim and
# raise the ValidationError their callers turn into a 400 naming the field (nothing else of Django).
CORE_BEYOND_STDLIB = {"core/schedule_rules.py": {"cronsim", "django.core.exceptions"}}


@pytest.mark.parametrize("path", sources("scheduling/core"), ids=rel)
def test_the_core_is_the_standard_library_only(path):
    allowed = CORE_BEYOND_STDLIB.get(path.relative_to(SCHEDULING).as_posix(), set())
    outside = {n for n in imports(path) if top(n) not in STDLIB | {"__future__", "scheduling"}}
    assert {n for n in outside if not any(n == a or n.startswith(a + ".") for a in allowed)} == set()
    assert {n for n in imports(path) if top(n) == "scheduling"} <= {
        n for n in imports(path) if n.startswith("scheduling.core")}


PURE = ["worker/holding.py", "delivery/pushback.py", "messages/wire.py", "messages/structured.py", "teams/keys.py",
        "teams/queues.py"]


@pytest.mark.parametrize("name", PURE)
def test_the_pure_parts_do_no_io(name):
    names = imports(SCHEDULING / name)
    assert not {n for n in names if top(n) in BROKER_LIBRARIES or n.endswith(("conf.broker", "rabbit.Broker"))}
    assert not any(n.startswith(("django.db", "scheduling.config.conf")) for n in names)


def module_path(name: str) -> Path | None:
    """The file of the longest importable prefix of ``name`` under the repository, if any."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def packages_of(path: Path) -> list[Path]:
    """The ``__init__.py`` of every package a module's import runs first."""
    inits, folder = [], path.parent
    while folder != ROOT:
        inits.append(folder / "__init__.py")
        folder = folder.parent
    return [p for p in inits if p.is_file() and p != path]


# settings.py reads the environment through the settings' declarations, which parse with what
# settings.py itself imports anyway (Django, python-dotenv, dj-database-url) and the pure topology/
EARLY_THIRD_PARTY = {"scheduling/config/specs.py": {"django", "dotenv", "dj_database_url", "topology"},
                     "scheduling/config/parsers.py": {"django", "dj_database_url", "topology"}}


def test_what_settings_and_gunicorn_import_early_is_the_standard_library_only():
    """settings.py (with delayplatform/logs.py) and gunicorn.conf.py import these before Django is
    set up, and gunicorn's master before prometheus_client: the standard library only, all the
    way down, through packages whose ``__init__`` imports nothing at module level."""
    early = [ROOT / "delayplatform" / "settings.py", ROOT / "delayplatform" / "logs.py", ROOT / "gunicorn.conf.py"]
    todo = {module_path(n) for path in early for n in imports(path, on_import=True) if top(n) == "scheduling"}
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path is None or path in seen:
            continue
        seen.add(path)
        names = imports(path, on_import=True)
        allowed = STDLIB | {"scheduling", "__future__"} | EARLY_THIRD_PARTY.get(rel(path), set())
        assert {top(n) for n in names} <= allowed, rel(path)
        todo |= {module_path(n) for n in names if top(n) == "scheduling"}
        for init in packages_of(path):
            module_level = [node for node in ast.parse(init.read_text()).body
                            if isinstance(node, (ast.Import, ast.ImportFrom)) and not (
                                isinstance(node, ast.ImportFrom) and node.module == "__future__")]
            assert not module_level, f"{rel(init)} imports at module level, and {rel(path)} is imported early"
    assert ROOT / "scheduling" / "observability" / "metrics_dir.py" in seen  # the check sees gunicorn's import


def test_scheduling_files_every_module_in_a_folder():
    assert sorted(p.name for p in SCHEDULING.glob("*.py")) == TOP_LEVEL


def architecture_names() -> set[str]:
    """What docs/architecture.md's tree of scheduling/ names: each folder, then its modules."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    tree = page.split("<!-- tree -->")[1]
    names, folder = set(), ""
    for line in tree.splitlines():
        words = line.split()
        if words and words[0].endswith("/"):
            folder = words[0]
            parts = folder.rstrip("/").split("/")
            names |= {"/".join(parts[:n]) + "/" for n in range(1, len(parts) + 1)}
        names |= {folder + name for name in re.findall(r"\b\w+\.py\b", line)}
    return names


def test_the_architecture_page_names_every_package_and_module():
    files = {str(p.relative_to(SCHEDULING)) for p in SCHEDULING.rglob("*.py")
             if not {"migrations", "commands"} & set(p.parts) and p.name != "__init__.py"}
    folders = {str(p.parent.relative_to(SCHEDULING)) + "/" for p in SCHEDULING.rglob("__init__.py")
               if "migrations" not in p.parts and p.parent != SCHEDULING}
    named = architecture_names()
    assert sorted((files | folders) - named) == [], "docs/architecture.md does not name these"
    assert sorted(named - files - folders - {"migrations/", "management/commands/"}) == [], \
        "docs/architecture.md names these, which do not exist"


def public_functions(path: Path) -> list[ast.FunctionDef]:
    return [node for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")]


@pytest.mark.parametrize("path", service_modules() + selector_modules(), ids=rel)
def test_services_and_selectors_are_keyword_only_and_named_entity_verb(path):
    for function in public_functions(path):
        positional = [a.arg for a in function.args.posonlyargs + function.args.args]
        assert not positional and function.args.vararg is None, \
            f"{rel(path)}: {function.name}({', '.join(positional)}, ...) is not keyword-only: def {function.name}(*, ...)"
        entity = max((e for e in ENTITIES if function.name.startswith(f"{e}_")), key=len, default=None)
        assert entity, f"{rel(path)}: {function.name} is not named <entity>_<verb> (entities: {', '.join(ENTITIES)})"


SERVICES_OR_SELECTORS = re.compile(r"scheduling\.\w+\.(services|selectors)")


def services_imported_as_modules(source: str) -> list[str]:
    """``from scheduling.messages import services`` and ``import scheduling.messages.services``:
    a service or selector module imported whole, its functions then called through it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [f"{node.module}.{a.name}" for a in node.names
                      if SERVICES_OR_SELECTORS.fullmatch(f"{node.module}.{a.name}")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if SERVICES_OR_SELECTORS.fullmatch(a.name)]
    return found


@pytest.mark.parametrize("path", sources("scheduling", "tests", "bench", "harness", "delayplatform"), ids=rel)
def test_services_and_selectors_are_imported_by_name(path):
    """One import style: ``from scheduling.messages.services import message_schedule``, so a
    reader sees at the top of a file which writes and reads it uses. (The prune's fault test
    replaces functions on the module itself, so it holds the module.)"""
    allowed = ["scheduling.retention.services"] if rel(path) == "tests/reliability/prune_child.py" else []
    assert services_imported_as_modules(path.read_text()) == allowed


DOMAIN_PACKAGES = sorted(p for p in SCHEDULING.glob("*/__init__.py")
                         if p.parent.name not in ("admin", "celery", "migrations", "models"))


@pytest.mark.parametrize("path", DOMAIN_PACKAGES, ids=rel)
def test_the_packages_re_export_nothing(path):
    """One import style: each function from its module. (admin/ registers its areas on import,
    celery/ keeps the names users import, loaded on first use; models/ is the app's models module,
    which Django imports whole and callers read as ``scheduling.models``.)"""
    assert not [node for node in ast.parse(path.read_text()).body if isinstance(node, (ast.Import, ast.ImportFrom))]


def test_the_rules_see_imports():
    """The checks above would pass on files they cannot read: make sure they can."""
    assert "kombu.Connection" in imports(ROOT / "rabbit" / "connection.py")
    assert "scheduling.core.lifecycle.Status" in imports(SCHEDULING / "models" / "messages.py")
    assert "scheduling.delivery.services.delivery_receive" in imports(SCHEDULING / "celery" / "tasks.py")
    assert "scheduling.versions.broker.topology_check" in imports(SCHEDULING / "versions" / "services.py")
    assert {"message_schedule", "message_cancel"} <= {f.name for f in public_functions(
        SCHEDULING / "messages" / "services.py")}
    assert len(service_modules()) > 20 and len(database_selectors()) == 13
    assert {"core/", "core/clock.py", "worker/loop.py"} <= architecture_names()
    assert services_imported_as_modules("from scheduling.messages import services\nimport scheduling.teams.selectors\n"
                                        "from scheduling.messages.services import message_cancel\n") == [
        "scheduling.messages.services", "scheduling.teams.selectors"]


# --- what runs beside the platform: harness, bench, tests ------------------------------------------

def sys_path_edits(source: str) -> list[str]:
    """The calls that change sys.path (``sys.path.insert(0, …)`` and the like), as written."""
    return [ast.unparse(node.func) for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("sys.path.insert", "sys.path.append", "sys.path.extend")]


@pytest.mark.parametrize("path", sources("bench", "tests", "harness"), ids=rel)
def test_no_sys_path_edits_beside_the_platform(path):
    """Benchmarks run as modules from the repository root (``python -m bench.suite``), tests under
    pytest's rootdir: both find the platform and harness/ without editing sys.path."""
    assert not sys_path_edits(path.read_text()), "run it as a module from the repository root"


def test_the_rules_beside_the_platform_see_what_they_look_for():
    """The check above would pass on files it cannot read: make sure it can."""
    assert sys_path_edits("import sys\nsys.path.insert(0, 'x')\nsys.path.append('y')\n") == [
        "sys.path.insert", "sys.path.append"]
    assert sys_path_edits("import sys\nprint(sys.path)\n") == []
    assert "harness.platform.platform" in imports(ROOT / "bench" / "cpu_split.py")
    assert "harness.waiting.wait_until" in imports(ROOT / "harness" / "celery_worker.py")

# --- settings declared once ------------------------------------------------------------------------

SETTING = re.compile(r"\bDELAY_[A-Z0-9_]+\b")
SPEC_MODULE = ROOT / "scheduling" / "config" / "specs.py"
TEST_SETTINGS = ROOT / "delayplatform" / "settings_test.py"  # the test suite's settings: tests may name them
NOT_SETTINGS = {"DELAY_BUCKETS"}  # AccuracyReport.DELAY_BUCKETS: the report's ranges of delays, not a setting
PLATFORM = ("delayplatform", "scheduling", "rabbit", "topology")


def spelled_setting_names(source: str) -> set[str]:
    """DELAY_* names in a module's identifiers and strings, docstrings aside (and comments, which
    the parser drops): a message or help text asks the spec for a name, code reads conf()."""
    tree = ast.parse(source)
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words = [node.value]
        elif isinstance(node, ast.alias):
            words = [node.name, node.asname or ""]
        else:
            words = [getattr(node, attr) for attr in ("id", "attr", "name", "arg")
                     if isinstance(getattr(node, attr, None), str)]
        found |= {name for word in words for name in SETTING.findall(word)}
    return found - NOT_SETTINGS


@pytest.mark.parametrize("path", [p for p in sources(*PLATFORM) if p not in (SPEC_MODULE, TEST_SETTINGS)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_setting_name_is_spelled_outside_its_declaration(path):
    assert not spelled_setting_names(path.read_text()), (
        "read the value through scheduling.config.conf.conf(), and name the variable with "
        "scheduling.config.conf.setting_name(field) (scheduling.config.specs.variable(key))")


def test_the_setting_names_rule_sees_names():
    """The check above would pass on files it cannot read: make sure it can."""
    assert spelled_setting_names('"""About DELAY_SHARDS."""\n# DELAY_RETENTION\nx = 1\n') == set()
    assert spelled_setting_names("x = settings.DELAY_SHARDS") == {"DELAY_SHARDS"}
    assert spelled_setting_names('log.error("set DELAY_BULK_MAX", n)') == {"DELAY_BULK_MAX"}
    assert spelled_setting_names('help = f"default: DELAY_DEFAULT_VERSION, {v}"') == {"DELAY_DEFAULT_VERSION"}
    assert spelled_setting_names("DELAY_SHARDS = 1\nH_DELAY_MS = 2") == {"DELAY_SHARDS"}
    assert {"DELAY_SHARDS", "DELAY_API_RATE"} <= spelled_setting_names(SPEC_MODULE.read_text())


# what reads the environment: os.environ.get("X"), os.environ["X"], "X" in os.environ, os.getenv("X")
NOT_THE_PLATFORMS = {
    "DJANGO_SETTINGS_MODULE": "Django's: which settings module (manage.py, wsgi, asgi, Celery set it)",
    "PYSPARK_GATEWAY_PORT": "set by spark-submit for the report's Spark job",
}


def environment_reads(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            function = node.func
            if isinstance(function, ast.Attribute) and (
                    (function.attr in ("get", "setdefault", "pop") and ast.unparse(function.value) == "os.environ")
                    or function.attr == "getenv"):
                found.add(node.args[0].value)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" \
                and isinstance(node.slice, ast.Constant):
            found.add(node.slice.value)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) \
                and any(ast.unparse(c) == "os.environ" for c in node.comparators):
            found.add(node.left.value)
    return found


def test_every_variable_the_platform_reads_is_declared():
    from scheduling.config import specs
    from scheduling.observability import metrics_dir

    declared = set(specs.BY_ENV)
    paths = [p for p in sources(*PLATFORM) if p != TEST_SETTINGS] + [ROOT / "gunicorn.conf.py", ROOT / "manage.py"]
    read = {name for path in paths for name in environment_reads(path)} | {metrics_dir.ENV}
    assert "SPARK_MASTER" in read and "DJANGO_SETTINGS_MODULE" in read  # the check sees what it looks for
    assert read - set(NOT_THE_PLATFORMS) <= declared


def test_the_test_order_names_existing_modules():
    """make test's longest-first order (tests/conftest.py SECONDS) keys on paths: a moved module
    would silently lose its place."""
    from tests.conftest import SECONDS

    missing = sorted(path for path in SECONDS if not (ROOT / "tests" / path).is_file())
    assert not missing, f"tests/conftest.py SECONDS names no module at: {missing}"


# --- tests mirror the code ------------------------------------------------------------------------
# Every module of these folders with MIRROR_LINES lines or more has tests/<same path>/test_<module>.py,
# or tests/tested_in.py names the tests that cover it (why one mapping: its docstring).
MIRRORED = ("scheduling", "rabbit", "topology")
MIRROR_LINES = 100


def mirror_of(path: Path) -> Path:
    """scheduling/teams/quotas.py -> tests/scheduling/teams/test_quotas.py."""
    relative = path.relative_to(ROOT)
    return ROOT / "tests" / relative.parent / f"test_{relative.name}"


def long_modules() -> list[Path]:
    return [p for p in sources(*MIRRORED) if p.name != "__init__.py" and len(p.read_text().splitlines()) >= MIRROR_LINES]


def untested(modules: list[Path], declared: dict) -> list[str]:
    """The modules with neither a mirror test nor a declaration."""
    return sorted(rel(p) for p in modules if not mirror_of(p).is_file() and rel(p) not in declared)


def test_every_long_module_has_its_mirror_test_or_names_its_tests():
    from tests.tested_in import TESTED_IN

    modules = long_modules()
    mirrored = [p for p in modules if mirror_of(p).is_file()]
    declared = [p for p in modules if rel(p) in TESTED_IN and not mirror_of(p).is_file()]
    print(f"\n{len(modules)} modules of {MIRROR_LINES} lines or more: {len(mirrored)} mirrored, "
          f"{len(declared)} declared in tests/tested_in.py")
    missing = untested(modules, TESTED_IN)
    assert not missing, f"no tests/<path>/test_<module>.py and not in tests/tested_in.py: {missing}"


def test_the_declared_tests_exist_and_each_declaration_is_needed():
    """A declaration names test modules that exist, for a module that exists, is long and has no
    mirror: a module moved, split or given its mirror test fails here until the entry follows."""
    from tests.tested_in import TESTED_IN

    long = {rel(p) for p in long_modules()}
    stale = sorted(m for m in TESTED_IN if m not in long or mirror_of(ROOT / m).is_file())
    named = sorted({t for tests in TESTED_IN.values() for t in tests})
    absent = [t for t in named if not (ROOT / t).is_file() or not Path(t).name.startswith("test_")]
    assert not stale, f"tests/tested_in.py declares modules missing, under {MIRROR_LINES} lines or mirrored: {stale}"
    assert not absent, f"tests/tested_in.py names tests that do not exist: {absent}"


def test_the_mirror_rule_sees_a_module_without_tests():
    """Without the declarations, exactly the declared modules are found untested; a mirrored one never."""
    from tests.tested_in import TESTED_IN

    assert untested(long_modules(), {}) == sorted(TESTED_IN)
    assert mirror_of(ROOT / "scheduling/teams/quotas.py") == ROOT / "tests/scheduling/teams/test_quotas.py"


def test_the_declared_boilerplate_names_existing_files():
    """tests/duplicates_declared.py: a glob that names no file any more is a stale declaration."""
    from tests.duplicates_declared import DECLARED

    stale = sorted({glob for a, b, _ in DECLARED for glob in (a, b) if not any(ROOT.glob(glob))})
    assert not stale, f"tests/duplicates_declared.py names no file at: {stale}"

"""Ruff over the whole repository (pyproject.toml [tool.ruff]: pycodestyle, pyflakes, import order,
bugbear, pyupgrade; clients/python by its own pyproject.toml), as `make lint` runs it. Half a
second: it runs in make test beside the rest."""

import subprocess
import sys
from pathlib import Path

from harness.paths import ROOT

RUFF = Path(sys.executable).parent / "ruff"


def ruff(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), "check", "--no-cache", "--output-format", "concise", *args], cwd=ROOT,
                          input=stdin, capture_output=True, text=True, timeout=120)


def test_the_repository_is_clean():
    """Every rule, the import order included: `make lint-fix` (ruff check --fix) sorts the imports."""
    result = ruff(".")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_ruff_sees_an_unused_import_and_our_packages_out_of_order():
    """The same configuration on a file it is handed: the platform's packages are first-party (after
    the third party, in a block of their own), and an unused import is an error."""
    source = "import os\nimport scheduling.core\nimport django\n\nprint(django, scheduling.core)\n"
    result = ruff("--stdin-filename", "scheduling/probe.py", "-", stdin=source)
    assert result.returncode == 1
    assert "scheduling/probe.py:1:1: I001" in result.stdout and "F401 [*] `os` imported but unused" in result.stdout
    ordered = "import django\n\nimport scheduling.core\n\nprint(django, scheduling.core)\n"
    assert ruff("--stdin-filename", "scheduling/probe.py", "-", stdin=ordered).returncode == 0

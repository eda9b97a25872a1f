"""The layering as import-linter contracts (pyproject.toml, [tool.importlinter]): kept by the code
as it is, and broken by an import against them (shown on a copy of the tree)."""

import shutil
import subprocess
import sys
from pathlib import Path

from harness.paths import ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("topology", "rabbit", "scheduling", "delayplatform", "harness", "bench", "tests")


def lint(where: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=where, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(where)})


def test_every_contract_is_kept():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "Contracts: 6 kept, 0 broken." in result.stdout


def test_an_import_against_the_layers_breaks_them(tmp_path):
    """A pure part that imports the harness and a service: three contracts name it."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    cursors = tmp_path / "scheduling" / "selectors" / "cursors.py"
    cursors.write_text(cursors.read_text().replace(
        "from __future__ import annotations\n",
        "from __future__ import annotations\n\nimport harness.waiting\nfrom scheduling.services import messages\n", 1))
    result = lint(tmp_path)
    assert result.returncode == 1 and "Contracts: 3 kept, 3 broken." in result.stdout, result.stdout[-3000:]
    assert "scheduling.selectors.cursors -> harness.waiting" in result.stdout
    assert "scheduling.selectors.cursors -> scheduling.services.messages" in result.stdout

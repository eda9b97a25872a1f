"""The documentation site builds strictly (what `make docs` runs): a broken link, a missing anchor, a
page left out of the nav or a snippet whose file is gone fails here, not on a reader. And README.md
stays a front door (at most 200 lines): the rest belongs on the site."""

import os
import subprocess
import sys
from pathlib import Path

from harness.paths import ROOT

MKDOCS = Path(sys.executable).parent / "mkdocs"
README_MAX_LINES = 200


def test_the_site_builds_strictly(tmp_path):
    result = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's notice about MkDocs 2.0, not ours
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "index.html").is_file()
    # the nav's pages and the files they link to are all there
    for page in ["reference/configuration", "reference/commands", "reference/api", "architecture",
                 "operations/performance", "operations/reliability", "observability/metrics"]:
        assert (tmp_path / page / "index.html").is_file(), page
    assert (tmp_path / "alerts.yml").is_file() and (tmp_path / "grafana-dashboard.json").is_file()


def test_the_readme_is_at_most_200_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move text to the site (docs/)"

"""mypy over the repository (pyproject.toml [tool.mypy]) held to mypy-baseline.txt: the errors of
each file counted, a count allowed to fall but never to rise, and a file the baseline does not
name (new code, and the strict packages always) allowed none. Counts, not lines: a file's errors
move with every edit above them.

    python -m harness.typecheck                   # check against the baseline (make types)
    python -m harness.typecheck --write-baseline  # rewrite it from today's errors (make lint-baseline)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from harness.paths import ROOT

BASELINE = ROOT / "mypy-baseline.txt"
# Checked strictly (pyproject.toml) and clean: none of their files may be in the baseline.
STRICT = ("scheduling/config/", "scheduling/core/", "scheduling/teams/", "scheduling/security/")
HEADER = """\
# mypy's errors per file (harness/typecheck.py; pyproject.toml [tool.mypy]): a file's count may fall,
# never rise, and a file not named here has none. `make lint-baseline` rewrites it after a fix.
"""
ERROR = re.compile(r"^(?P<path>[^:\s]+\.pyi?):\d+(?::\d+)?: error: ")


@dataclass(frozen=True)
class Run:
    counts: Counter[str]  # errors per file
    output: str  # mypy's own lines


def mypy(cache_dir: Path | None = None) -> Run:
    """mypy as pyproject.toml configures it; its cache in ``cache_dir`` (the repository's
    .mypy_cache, git-ignored, by default: a second run takes a quarter of the first)."""
    command = [str(Path(sys.executable).parent / "mypy"), "--no-error-summary", "--no-pretty",
               "--cache-dir", str(cache_dir or ROOT / ".mypy_cache")]
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_XDIST_WORKER"}
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    if result.returncode not in (0, 1) or "error: " in result.stderr:
        raise RuntimeError(f"mypy did not run (exit {result.returncode}): {result.stderr[-3000:]}{result.stdout[-3000:]}")
    counts = Counter(match["path"] for match in map(ERROR.match, result.stdout.splitlines()) if match)
    return Run(counts, result.stdout)


def baseline_read(path: Path = BASELINE) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            file, count = line.rsplit(" ", 1)
            counts[file] = int(count)
    return counts


def baseline_write(counts: Counter[str], path: Path = BASELINE) -> None:
    path.write_text(HEADER + "".join(f"{file} {count}\n" for file, count in sorted(counts.items()) if count))


def over_baseline(counts: Counter[str], baseline: Counter[str]) -> dict[str, tuple[int, int]]:
    """The files with more errors than the baseline allows: {path: (errors, allowed)}."""
    return {file: (n, baseline[file]) for file, n in sorted(counts.items()) if n > baseline[file]}


def summary(baseline: Counter[str]) -> str:
    return f"mypy baseline: {sum(baseline.values())} errors in {len(baseline)} files"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-baseline", action="store_true", help="rewrite mypy-baseline.txt from this run")
    args = parser.parse_args()
    run = mypy()
    if args.write_baseline:
        strict = sorted(file for file in run.counts if file.startswith(STRICT))
        if strict:
            print(run.output, end="")
            print(f"the strict packages have errors (fix them; they never go in the baseline): {', '.join(strict)}")
            return 1
        baseline_write(run.counts)
        print(f"wrote {BASELINE.name}: {summary(run.counts).removeprefix('mypy baseline: ')}")
        return 0
    baseline = baseline_read()
    over = over_baseline(run.counts, baseline)
    print(summary(baseline))
    if over:
        shown = set(over)
        print("".join(line + "\n" for line in run.output.splitlines()
                      if (match := ERROR.match(line)) and match["path"] in shown), end="")
        for file, (n, allowed) in over.items():
            print(f"{file}: {n} errors, {allowed} allowed by {BASELINE.name}")
        return 1
    fallen = sum(baseline.values()) - sum(run.counts.values())
    if fallen > 0:
        print(f"{fallen} fewer than the baseline: `make lint-baseline` keeps the gain")
    return 0


if __name__ == "__main__":
    sys.exit(main())

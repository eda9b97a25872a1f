"""mypy with the Django and DRF plugins (pyproject.toml [tool.mypy]) held to mypy-baseline.txt
(harness/typecheck.py): strict packages with no error, every other file at most its baseline's
count, a file the baseline does not name (new code) with none. About a minute from a cold cache
(the repository's .mypy_cache), a quarter of that warm."""

import subprocess
import sys
from collections import Counter
from pathlib import Path

from harness import typecheck
from harness.paths import ROOT


def test_mypy_keeps_to_the_baseline(record_property):
    baseline = typecheck.baseline_read()
    record_property("summary", typecheck.summary(baseline))
    run = typecheck.mypy()
    over = typecheck.over_baseline(run.counts, baseline)
    shown = "".join(line + "\n" for line in run.output.splitlines() if line.split(":", 1)[0] in over)
    assert not over, f"{typecheck.summary(baseline)}; over it: {over}\n{shown[-8000:]}"


def test_the_strict_packages_are_never_in_the_baseline():
    assert not [file for file in typecheck.baseline_read() if file.startswith(typecheck.STRICT)]


def test_a_count_may_fall_but_not_rise_and_new_files_have_none():
    baseline = Counter({"scheduling/a.py": 3})
    assert typecheck.over_baseline(Counter({"scheduling/a.py": 2}), baseline) == {}
    assert typecheck.over_baseline(Counter({"scheduling/a.py": 4}), baseline) == {"scheduling/a.py": (4, 3)}
    assert typecheck.over_baseline(Counter({"scheduling/new.py": 1}), baseline) == {"scheduling/new.py": (1, 0)}


def test_the_baseline_reads_back_as_written(tmp_path):
    counts = Counter({"bench/b.py": 2, "scheduling/a.py": 5, "tests/gone.py": 0})
    typecheck.baseline_write(counts, tmp_path / "baseline.txt")
    assert typecheck.baseline_read(tmp_path / "baseline.txt") == Counter({"bench/b.py": 2, "scheduling/a.py": 5})
    assert typecheck.summary(typecheck.baseline_read(tmp_path / "baseline.txt")) == "mypy baseline: 7 errors in 2 files"


def test_mypy_is_strict_in_the_strict_packages_only(tmp_path):
    """The repository's configuration on one unannotated function put in place of a strict module
    and of another: an error in scheduling/core, none in bench/ (its own cache: a few seconds)."""
    probe = tmp_path / "probe.py"
    probe.write_text("def double(x):\n    return x * 2\n\n\nhalf: int = 'one'\n")
    strict, other = "scheduling/core/durations.py", "bench/table.py"
    result = subprocess.run([str(Path(sys.executable).parent / "mypy"), "--no-error-summary", "--cache-dir",
                             str(tmp_path / "cache"), "--shadow-file", strict, str(probe), "--shadow-file", other,
                             str(probe), strict, other], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    errors = sorted(line.split("  [")[-1] for line in result.stdout.splitlines() if ": error: " in line)
    assert f"{strict}:1: error: Function is missing a type annotation  [no-untyped-def]" in result.stdout
    assert f"{strict}:5: error: Incompatible types in assignment" in result.stdout
    assert f"{other}:5: error: Incompatible types in assignment" in result.stdout
    assert errors == ["assignment]", "assignment]", "no-untyped-def]"], result.stdout

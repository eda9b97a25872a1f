"""Where the repository is, and where runs leave their logs and figures (artifacts/, which git
ignores): tests and benchmarks start processes from the root and write beside each other."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"

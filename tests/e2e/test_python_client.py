"""The Python client (clients/python) as its users get it: the wheel built with ``python -m
build``, installed with its test extra into a fresh virtualenv that has none of this project on
its path, and its own suite run there, against a platform that suite starts (harness/serve.py:
its own vhost, database, gunicorn and worker) and an external Celery app's worker of its own."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.paths import ARTIFACTS, ROOT

pytestmark = [pytest.mark.e2e]
CLIENT = ROOT / "clients" / "python"
# this run's own settings, which another codebase's processes must not inherit (Celery reads
# BROKER_URL from the environment before its app's own broker); BENCH_* stay: they say which
# RabbitMQ node the platform the client's suite starts is to use
PROJECT_ONLY = {"PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "BROKER_URL", "DATABASE_URL",
                "RABBITMQ_MANAGEMENT_URL", "SECRET_KEY"}


def constraints(path: Path) -> Path:
    """This project's pins, every set of requirements/ (extras dropped: pip refuses them in
    constraints) so the client's dependencies it shares (Celery, Django, httpx, pytest) are the
    versions tested here."""
    pins = [re.sub(r"\[[^\]]*\]", "", line) for file in sorted((ROOT / "requirements").glob("*.txt"))
            for line in file.read_text().splitlines() if "==" in line and not line.lstrip().startswith("#")]
    path.write_text("\n".join(pins) + "\n")
    return path


def run(args, **kwargs):
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, args))} failed:\n{result.stdout[-6000:]}\n{result.stderr[-4000:]}"
    return result


def test_the_installed_wheel_passes_its_own_suite(tmp_path):
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(CLIENT)], timeout=300)
    (wheel,) = (tmp_path / "dist").glob("delayplatform_client-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", "-c", str(constraints(tmp_path / "constraints.txt")),
         "-c", str(CLIENT / "tests" / "constraints.txt"), f"{wheel}[test]"], timeout=900)
    env = {k: v for k, v in os.environ.items() if k not in PROJECT_ONLY and not k.startswith(("PYTEST_", "CELERY_"))}
    env["DELAYCLIENT_PLATFORM_PYTHON"] = sys.executable
    log = ARTIFACTS / f"python-client-tests-{os.environ.get('DP_TEST_RUN_ID', 'local')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:randomly", "--junit-xml",
                             str(tmp_path / "junit.xml")], cwd=CLIENT, env=env, capture_output=True, text=True,
                            timeout=1500)
    log.write_text(result.stdout + result.stderr)
    assert result.returncode == 0, f"the client's suite failed (all of it in {log}):\n{result.stdout[-8000:]}"
    summary = result.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed >= 150 and "skipped" not in summary, summary  # the platform ones ran, none skipped

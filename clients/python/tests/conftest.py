"""The client's own tests. Pure ones need nothing; the ``platform`` ones talk to a real platform:
the one DELAYCLIENT_URL and DELAYCLIENT_KEY name (DELAYCLIENT_BROKER_URL for the Celery tests),
or else one these tests start from the repository they sit in (``harness.serve``: its own
RabbitMQ vhost and PostgreSQL database, gunicorn and a worker), removed at the end. The client
under test is the installed package: nothing of the platform's code is imported here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[3]
START_TIMEOUT = 300


@dataclass(frozen=True)
class Platform:
    url: str
    key: str
    team: str
    broker_url: str | None
    management_url: str | None
    vhost: str | None


def _platform_python() -> str:
    given = os.environ.get("DELAYCLIENT_PLATFORM_PYTHON")
    if given:
        return given
    venv = REPOSITORY / ".venv" / "bin" / "python"
    if not (REPOSITORY / "manage.py").exists() or not venv.exists():
        raise RuntimeError("no platform to test against: set DELAYCLIENT_URL and DELAYCLIENT_KEY, or run the "
                           "tests from the platform's repository after `make venv`")
    return str(venv)


def _start() -> tuple[subprocess.Popen, dict]:
    process = subprocess.Popen(
        [_platform_python(), "-m", "harness.serve", "--allow-network", "127.0.0.0/8", "--allow-task", "extapp.tasks.*"],
        cwd=REPOSITORY, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")},
    )
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT)
    if not line or not line[0].strip():
        process.kill()
        raise RuntimeError(f"the platform did not start within {START_TIMEOUT} s (exit {process.poll()}); "
                           f"see {REPOSITORY / 'artifacts'}")
    return process, json.loads(line[0])


@pytest.fixture(scope="session")
def platform():
    if os.environ.get("DELAYCLIENT_URL"):
        yield Platform(os.environ["DELAYCLIENT_URL"], os.environ["DELAYCLIENT_KEY"],
                       os.environ.get("DELAYCLIENT_TEAM", ""), os.environ.get("DELAYCLIENT_BROKER_URL"),
                       os.environ.get("DELAYCLIENT_MANAGEMENT_URL"), os.environ.get("DELAYCLIENT_VHOST"))
        return
    process, info = _start()
    try:
        yield Platform(info["url"], info["key"], info["team"], info["broker_url"], info["management_url"],
                       info["vhost"])
    finally:
        process.stdin.close()  # the platform removes its vhost and database
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def client(platform):
    from delayclient import Client

    with Client(platform.url, platform.key) as made:
        yield made


@pytest.fixture
def unique():
    return uuid.uuid4().hex[:10]


@pytest.fixture
def endpoint(client, unique):
    """A plain endpoint (handler none: the platform records the delivery) of the test's own."""
    return client.endpoints.create(f"ep-{unique}")


def pytest_collection_modifyitems(config, items):
    """Tests that use the platform are marked so (``-m "not platform"`` runs the pure ones)."""
    for item in items:
        if "platform" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.platform)


def assert_not_project_code() -> None:
    """The platform's packages must not be importable here: the client stands alone."""
    for name in ("scheduling", "delayplatform", "harness", "topology", "rabbit"):
        assert name not in sys.modules, f"{name} was imported by the client's tests"

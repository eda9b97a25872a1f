"""manage.py worker_health against a real worker (it answers through Celery's remote control and
its delivery loop runs), and without one; what each kind of answer means."""

import socket
import subprocess
import sys

import pytest

from harness.paths import ROOT
from scheduling.management.commands.worker_health import problem


def worker_health(env, *args):
    return subprocess.run([sys.executable, "manage.py", "worker_health", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.e2e
@pytest.mark.broker
@pytest.mark.django_db(transaction=True)
def test_exits_0_for_a_running_worker_and_1_once_it_is_gone(worker, worker_env):
    node = f"{worker.name}@{socket.gethostname()}"
    done = worker_health(worker_env, "--node", node)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{node} ok: delivery loop running")

    worker.stop()
    gone = worker_health(worker_env, "--node", node, "--timeout", "1")
    assert gone.returncode == 1
    assert gone.stderr.strip().splitlines() == [
        f"CommandError: {node} did not answer (not running, or not connected to the broker)"]


@pytest.mark.broker
@pytest.mark.django_db(transaction=True)
def test_exits_1_when_no_worker_runs_on_this_host(worker_env):
    """The default node name is celery@<this host>; no worker of that name runs in the tests."""
    done = worker_health(worker_env, "--timeout", "1")
    assert done.returncode == 1
    assert done.stderr.strip() == (f"CommandError: celery@{socket.gethostname()} did not answer "
                                   "(not running, or not connected to the broker)")


RUNNING = {"loop": "running", "connected": True, "idle_seconds": 0.05, "consuming": 2}


@pytest.mark.parametrize(("answer", "expected"), [
    (RUNNING, None),
    ({"loop": "off"}, None),
    ({**RUNNING, "idle_seconds": 31.0}, "n@h: delivery loop stuck (last turn 31 s ago)"),
    ({**RUNNING, "connected": False}, "n@h: delivery loop not connected to the broker"),
    ({"loop": "stopped", "connected": False, "idle_seconds": 1, "consuming": 0}, "n@h: delivery loop stopped"),
    ({"loop": "not started"}, "n@h: delivery loop not started"),
    ({"error": "No such command"}, "n@h cannot tell its health: No such command"),
])
def test_what_an_answer_means(answer, expected):
    assert problem("n@h", [{"n@h": answer}], stale_after=30) == expected


def test_an_answer_from_another_node_is_no_answer():
    assert problem("n@h", [{"other@h": RUNNING}], stale_after=30).startswith("n@h did not answer")

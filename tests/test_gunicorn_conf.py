"""gunicorn.conf.py's hooks in a process of their own, as gunicorn calls them: a web worker lowers
its CPU priority by DELAY_WEB_NICE after the fork (delivery before intake), and a wrong value
stops it with one line naming the variable."""

import os
import subprocess
import sys

from harness.paths import ROOT

PROGRAM = ("import os, runpy; hooks = runpy.run_path('gunicorn.conf.py'); before = os.nice(0); "
           "hooks['post_fork'](None, None); print(os.nice(0) - before)")


def run(**env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("DELAY_WEB_NICE", "ENV_FILE")}
    return subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**clean, "ENV_FILE": "/nonexistent", **env})


def test_a_web_worker_runs_at_the_lower_priority_the_setting_asks():
    assert run().stdout.strip() == "5"  # the default
    assert run(DELAY_WEB_NICE="2").stdout.strip() == "2"
    assert run(DELAY_WEB_NICE="0").stdout.strip() == "0"


def test_a_wrong_value_names_the_variable():
    result = run(DELAY_WEB_NICE="fast")
    assert result.returncode != 0 and "DELAY_WEB_NICE" in result.stderr.strip().splitlines()[-1]

"""``delayctl``, the installed console script, against the real platform, as a shell script uses it."""

import json
import os
import subprocess
import sys
from pathlib import Path

DELAYCTL = Path(sys.executable).parent / "delayctl"


def run(platform, *args, stdin=None):
    env = {**os.environ, "DELAY_PLATFORM_URL": platform.url, "DELAY_PLATFORM_KEY": platform.key}
    return subprocess.run([str(DELAYCTL), *args], input=stdin, capture_output=True, text=True, env=env, timeout=60)


def test_schedule_get_list_cancel(platform, endpoint):
    made = run(platform, "schedule", endpoint.name, "--delay", "3600", "-", stdin='{"invoice": 42}')
    assert made.returncode == 0, made.stderr
    message_id = made.stdout.strip()
    got = json.loads(run(platform, "--json", "get", message_id).stdout)
    assert got["id"] == message_id and got["payload"] == {"invoice": 42} and got["status"] in ("pending", "published")
    listed = run(platform, "list", "--endpoint", endpoint.name)
    assert listed.returncode == 0 and message_id in listed.stdout
    cancelled = run(platform, "cancel", message_id)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    again = run(platform, "reschedule", message_id, "--delay", "60")
    assert again.returncode == 1 and again.stderr.startswith("delayctl: 409") and "Traceback" not in again.stderr


def test_preview_and_errors(platform):
    preview = run(platform, "preview", "--cron", "0 9 * * 1", "--timezone", "UTC", "--after",
                  "2026-11-28T00:00:00Z", "--count", "2")
    assert preview.stdout.split() == ["2026-11-30T09:00:00Z", "2026-12-07T09:00:00Z"], preview.stdout
    unknown = run(platform, "schedule", "no-such-endpoint", "--delay", "1")
    assert unknown.returncode == 1 and "endpoint" in unknown.stderr
    assert run(platform, "cancel-task", "no-such-task").stdout.strip() == "0"


def test_an_unreachable_platform_exits_3(platform):
    env = {**os.environ, "DELAY_PLATFORM_URL": "http://127.0.0.1:9", "DELAY_PLATFORM_KEY": platform.key}
    gone = subprocess.run([str(DELAYCTL), "--timeout", "2", "get", "x"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert gone.returncode == 3 and gone.stderr.startswith("delayctl: cannot reach")

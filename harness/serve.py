"""A throwaway platform for another process's tests (the Python client's suite, which runs in a
virtualenv of its own with none of this project on its path): started as harness.platform starts
one (own vhost and database, gunicorn, a Celery worker, a team with a key), described as one JSON
line on stdout, and removed when stdin closes or on SIGTERM.

    .venv/bin/python -m harness.serve --allow-task 'shop.tasks.*' --allow-network 127.0.0.0/8
    {"url": "http://127.0.0.1:…", "key": "dpk_…", "team": "bench", "broker_url": "amqp://…/dp-bench-…",
     "management_url": "http://guest:guest@127.0.0.1:15672", "vhost": "dp-bench-…"}
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from harness import platform as throwaway


def _wait_for_end() -> None:
    """Until the parent closes our stdin (it exited, or is done) or sends SIGTERM."""
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allow-task", action="append", default=[], metavar="PATTERN",
                        help="Celery tasks the team (and the platform) allow, e.g. 'shop.tasks.*' (default: any)")
    parser.add_argument("--allow-network", action="append", default=[], metavar="CIDR")
    parser.add_argument("--web-workers", type=int, default=2)
    args = parser.parse_args(argv)
    tasks = args.allow_task or ["*"]
    team_args = [*(a for p in tasks for a in ("--allow-task", p)),
                 *(a for n in args.allow_network for a in ("--allow-network", n))]
    env = {"DELAY_DELIVERY_PROCESSES": "1", "DELAY_SWEEP_SECONDS": "1", "LOG_LEVEL": "INFO",
           "DELAY_CELERY_TASK_ALLOWLIST": ",".join(tasks)}  # the platform's allowlist and the team's
    with throwaway.platform(web_workers=args.web_workers, team_args=tuple(team_args), **env) as p:
        p.start_worker("client-tests")
        broker_url = p.env["BROKER_URL"]
        print(json.dumps({"url": p.url, "key": p.key, "team": throwaway.TEAM, "broker_url": broker_url,
                          "management_url": throwaway.MANAGEMENT, "vhost": broker_url.rsplit("/", 1)[-1]}),
              flush=True)
        _wait_for_end()
    return 0


if __name__ == "__main__":
    sys.exit(main())

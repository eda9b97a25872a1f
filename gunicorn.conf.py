"""gunicorn's settings, read from ./gunicorn.conf.py by default (scripts/run.sh, the Dockerfile and
docker-compose all start gunicorn here). /metrics must count every worker process, whichever one
answers a scrape: prometheus_client's multiprocess mode, in a directory of this server's own,
emptied at start (scheduling/observability/metrics_dir.py); a worker that exits is marked dead."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scheduling.observability import metrics_dir  # noqa: E402  (standard library only: no Django yet)

_made = []


def on_starting(server):
    """In the master, before any worker is forked (and imports prometheus_client)."""
    path, made = metrics_dir.set_up(prefix="dp-web-metrics-")
    if made:
        _made.append(path)


def post_fork(server, worker):
    """Delivery before intake when both compete for the cores: each web worker runs at a lower
    CPU priority (DELAY_WEB_NICE); a platform worker's delivery loops keep theirs."""
    from scheduling.config import specs

    specs.load_env_file()
    os.nice(specs.BY_KEY["web_nice"].read(os.environ))


def child_exit(server, worker):
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    for path in _made:
        metrics_dir.remove(path)

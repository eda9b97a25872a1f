"""The directory where a multi-process server's processes keep their metrics (prometheus_client's
multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR``): gunicorn's workers, a Celery worker's prefork
children and its main process each write their own files there, summed at scrape time.

One directory per server instance, emptied when it starts: files left by an earlier run would
add its counts to this one's, and two instances sharing one would add up each other's. So the
directory is locked while the instance runs; a directory another live instance holds is not
used, a fresh one is made instead. Standard library only: gunicorn's config imports this before
Django or prometheus_client, which must find the variable set when it is first imported.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)
ENV = "PROMETHEUS_MULTIPROC_DIR"
LOCK_NAME = ".instance.lock"
_locks: dict[str, int] = {}  # directory -> the descriptor holding its lock, open for the process's life


def _lock(path: Path) -> bool:
    fd = os.open(path / LOCK_NAME, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _locks[str(path)] = fd
    return True


def prepare(directory: str | None, *, prefix: str) -> tuple[str, bool]:
    """A clean, locked directory for this instance: ``directory`` when given and free (its old
    files removed), else a new temporary one. Returns (path, whether it was made here: the
    caller removes such a one on exit)."""
    if directory:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        if str(path) in _locks or _lock(path):
            own = f"_{os.getpid()}.db"
            for stale in path.glob("*.db"):
                if not stale.name.endswith(own):  # this process's own files, if it counted already
                    stale.unlink()
            return str(path), False
        log.warning("%s=%s is in use by another running server; this one keeps its metrics in a directory "
                    "of its own (give each instance its own)", ENV, directory)
    path = Path(tempfile.mkdtemp(prefix=prefix))
    _lock(path)
    return str(path), True


def set_up(*, prefix: str) -> tuple[str, bool]:
    """Prepare the directory ``PROMETHEUS_MULTIPROC_DIR`` names (or a new one) and name it there,
    so that the processes started from here on use it."""
    path, made = prepare(os.environ.get(ENV), prefix=prefix)
    os.environ[ENV] = path
    return path, made


def remove(path: str) -> None:
    """Drop a directory made by ``prepare`` (on exit)."""
    fd = _locks.pop(path, None)
    if fd is not None:
        os.close(fd)
    shutil.rmtree(path, ignore_errors=True)

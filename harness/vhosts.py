"""Vhosts of a test's (or a benchmark's) own, added and deleted one at a time on this machine.

RabbitMQ 3.10.8 can stop adding vhosts for good (a new vhost's message store never starts;
every later add, delete and connection to it times out) while several test processes share it,
even with one machine-wide file lock held while a vhost is added or deleted, so each test process
has a node of its own (tests/conftest.py). The lock is for what still shares the machine's node:
a benchmark beside a test run, two runs at once."""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = Path(tempfile.gettempdir()) / "dp-vhost-lifecycle.lock"


@contextmanager
def vhost_lifecycle_lock() -> Iterator[None]:
    with open(LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def vhost_create(*, management, vhost: str) -> None:
    with vhost_lifecycle_lock():
        management.create_vhost(vhost)


def vhost_delete(*, management, vhost: str) -> None:
    with vhost_lifecycle_lock():
        management.delete_vhost(vhost)


@contextmanager
def vhost_own(*, management, vhost: str) -> Iterator[str]:
    """A vhost for the block, deleted after it whatever happens."""
    vhost_create(management=management, vhost=vhost)
    try:
        yield vhost
    finally:
        vhost_delete(management=management, vhost=vhost)

"""Run a function in several threads released at the same moment: two sweepers, two beats, two
publishers racing, each on a database connection of its own (closed when its thread ends)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def at_once(function: Callable, threads: int = 2, timeout: float = 60) -> list:
    """Each thread's result (in no particular order); the first error any thread raised is raised."""
    from django.db import connection

    barrier, results, errors = threading.Barrier(threads), [], []

    def run():
        try:
            barrier.wait()
            results.append(function())
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread below
            errors.append(exc)
        finally:
            connection.close()

    started = [threading.Thread(target=run) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(timeout)
    if errors:
        raise errors[0]
    return results

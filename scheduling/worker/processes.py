"""More delivery loops than the worker's own thread: DELAY_DELIVERY_PROCESSES − 1 processes
that the worker starts beside it, each running a DeliveryLoop, watched and started again when
one dies, stopped with the worker.

Why processes, not threads: a loop's webhook calls, records and acks share one interpreter lock;
one process made ~2,900 webhook calls/s with its three threads busy, two made ~4,700 on the same
2 cores (docs/operations/performance.md). Each loop consumes every endpoint queue; the broker spreads the
messages over them as over several workers, and what several workers already share (flow
control's slots, ``max_concurrent``, the rescue, leases) holds between loops the same way.

Started with ``spawn``: forking the worker's process, whose other threads may hold locks, is not
safe. A loop process whose worker is gone (SIGKILLed) stops by itself within a second.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time

log = logging.getLogger(__name__)
WATCH_SECONDS = 1.0  # how often the worker looks for a loop process that died; a child for its parent
QUICK_DEATH_SECONDS = 10.0  # a process that died sooner than this after its start is started again after a pause


class LoopProcesses:
    """``count`` loop processes of the worker named ``worker_name`` (each records deliveries as
    ``<worker_name>/<n>``, n from 2: the worker's own thread is the first loop)."""

    def __init__(self, worker_name: str, count: int):
        self.worker_name, self.count = worker_name, count
        self.context = multiprocessing.get_context("spawn")
        self.processes: dict[int, multiprocessing.Process] = {}
        self.ready: dict[int, object] = {}  # number -> its Event: set once it listens to SIGUSR1
        self.started_at: dict[int, float] = {}
        self.stopping = threading.Event()
        self.watcher = threading.Thread(target=self._watch, name="dp-loop-processes", daemon=True)

    def start(self) -> None:
        for number in range(2, self.count + 2):
            self._start(number)
        self.watcher.start()

    def sync(self) -> None:
        """Endpoints changed (the worker's dp_sync_endpoints): each loop process syncs now too
        (SIGUSR1), not at its next look DELAY_CONSUMER_SYNC_SECONDS later."""
        for number, process in self.processes.items():
            if process.is_alive() and self.ready[number].is_set():  # before: SIGUSR1 would end it
                os.kill(process.pid, signal.SIGUSR1)

    def alive(self) -> int:
        return sum(process.is_alive() for process in self.processes.values())

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM to each (its loop stops as the worker's does: calls out are handed back, held
        messages go back to the broker unacked), then wait; SIGKILL what is left."""
        self.stopping.set()
        for process in self.processes.values():
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + timeout
        for process in self.processes.values():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.warning("delivery loop process %s did not stop in %ss; killed", process.pid, timeout)
                process.kill()
                process.join(5)
            _mark_dead(process.pid)

    def _start(self, number: int) -> None:
        self.ready[number] = self.context.Event()
        process = self.context.Process(target=run, args=(f"{self.worker_name}/{number}", os.getpid(),
                                                         self.ready[number]),
                                       name=f"dp-delivery-{number}", daemon=True)
        process.start()
        self.processes[number], self.started_at[number] = process, time.monotonic()
        log.info("delivery loop process %d started (pid %s)", number, process.pid)

    def _watch(self) -> None:
        while not self.stopping.wait(WATCH_SECONDS):
            for number, process in list(self.processes.items()):
                if process.is_alive() or self.stopping.is_set():
                    continue
                _mark_dead(process.pid)
                if process.exitcode == 0:  # it was told to stop (SIGTERM to the worker's group): so is the worker
                    log.info("delivery loop process %d (pid %s) stopped", number, process.pid)
                    del self.processes[number]
                    continue
                lived = time.monotonic() - self.started_at[number]
                log.error("delivery loop process %d (pid %s) exited with %s after %.0f s; starting it again",
                          number, process.pid, process.exitcode, lived)
                if lived < QUICK_DEATH_SECONDS and self.stopping.wait(QUICK_DEATH_SECONDS):
                    return
                self._start(number)


def _mark_dead(pid: int | None) -> None:
    """Its live gauges leave the worker's metrics (prometheus_client's multiprocess mode)."""
    from scheduling.observability import metrics_dir

    if pid and os.environ.get(metrics_dir.ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


def run(worker_name: str, parent_pid: int, ready) -> None:
    """A loop process's life: Django set up, the loop run until SIGTERM or SIGINT, or until the
    worker that started it is gone; SIGUSR1: follow endpoint changes now."""
    stop, sync = threading.Event(), threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: sync.set())
    ready.set()
    import django

    django.setup()
    from scheduling.worker.loop import DeliveryLoop

    # the worker's own loop rescues its queues; this one syncs when ``sync`` is set, and clears it
    loop = DeliveryLoop(worker_name=worker_name, rescue=False, sync_now=sync)
    loop.start()
    while not stop.wait(WATCH_SECONDS):
        if os.getppid() != parent_pid:
            log.warning("delivery loop %s: its worker is gone; stopping", worker_name)
            break
        if not loop.is_alive():
            raise SystemExit(f"delivery loop {worker_name} ended")
    loop.stop()

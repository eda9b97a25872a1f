"""Worker side of the platform: a bootstep that runs the delivery loop (scheduling/worker/loop.py)
inside every platform worker, and a remote-control command that makes it follow endpoint changes
at once (it also re-reads the endpoint table every few seconds, so a missed broadcast only delays
the change). Another, ``dp_health``, answers how the loop is, for ``manage.py worker_health``.

The hook that puts every Celery task that comes out of the cascade through the lifecycle is
scheduling/celery/claim.py (setting ``CELERY_TASK_ANNOTATIONS``).
"""

import logging

from celery import bootsteps
from celery.worker.control import control_command

from scheduling.config.conf import conf
from scheduling.probes import metrics_worker  # noqa: F401  (every worker serves its metrics: the signals it connects)
from scheduling.worker import stale_connections  # noqa: F401  (the task_prerun signal it connects)

log = logging.getLogger(__name__)
_loop = None
_processes = None  # the loops beyond the worker's own thread (processes.py)


class DeliveryLoopStep(bootsteps.StartStopStep):
    requires = {"celery.worker.consumer.tasks:Tasks"}

    def include_if(self, parent):
        return conf().delivery_loop  # off for a worker that only runs ordinary tasks

    def start(self, consumer):
        from scheduling.worker.loop import DeliveryLoop
        from scheduling.worker.processes import LoopProcesses

        global _loop, _processes
        if _loop is None or not _loop.is_alive():
            _loop = DeliveryLoop(worker_name=consumer.hostname)
            _loop.start()
        if _processes is None and conf().delivery_processes > 1:
            _processes = LoopProcesses(consumer.hostname, conf().delivery_processes - 1)
            _processes.start()

    def shutdown(self, consumer):
        global _loop, _processes
        if _processes is not None:
            _processes.stop()
            _processes = None
        if _loop is not None:
            _loop.stop()
            _loop = None


@control_command()
def dp_sync_endpoints(state):
    """Endpoint added, paused or resumed: consume accordingly now."""
    if _loop is not None:
        _loop.sync_now.set()
    if _processes is not None:
        _processes.sync()
    return {"ok": "syncing"}


@control_command()
def dp_health(state):
    """This worker answers (its consumer is up) and how its delivery loop is (manage.py worker_health)."""
    if not conf().delivery_loop:
        return {"loop": "off"}
    health = _loop.health() if _loop is not None else {"loop": "not started"}
    if _processes is not None:
        health["loop_processes"] = f"{_processes.alive()} of {_processes.count} running"
    return health

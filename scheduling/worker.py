"""Worker side of the platform: a bootstep that runs the delivery loop (scheduling/
delivery_loop.py) inside every platform worker, and a remote-control command that makes it
follow endpoint changes at once (it also re-reads the endpoint table every few seconds, so a
missed broadcast only delays the change)."""

import logging

from celery import bootsteps
from celery.worker.control import control_command

log = logging.getLogger(__name__)
_loop = None


class DeliveryLoopStep(bootsteps.StartStopStep):
    requires = {"celery.worker.consumer.tasks:Tasks"}

    def include_if(self, parent):
        from django.conf import settings

        return settings.DELAY_DELIVERY_LOOP  # off for a worker that only runs ordinary tasks

    def start(self, consumer):
        from .delivery_loop import DeliveryLoop

        global _loop
        if _loop is None or not _loop.is_alive():
            _loop = DeliveryLoop()
            _loop.start()

    def shutdown(self, consumer):
        global _loop
        if _loop is not None:
            _loop.stop()
            _loop = None


@control_command()
def dp_sync_endpoints(state):
    """Endpoint added, paused or resumed: consume accordingly now."""
    if _loop is not None:
        _loop.sync_now.set()
    return {"ok": "syncing"}

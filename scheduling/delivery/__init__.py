"""Delivery, the far end of the cascade inside a worker: the loop that consumes the endpoints'
queues (loop.py: only the I/O), its timer and the one retry rule (holding.py, backoff.py; pure),
the handlers that run a delivered message (handlers.py: nothing, a Celery task, a webhook), and
the worker's bootstep that runs the loop (worker.py). Recording a delivery is a service
(services/delivery.py)."""

# Import-light on purpose: delayplatform/celery.py imports the worker's bootstep while the Celery
# app is built, which imports this package first.

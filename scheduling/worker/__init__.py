"""The worker process: the delivery loop's thread (loop.py: its turn; its parts each in a module of
their own: docs/architecture.md) and its timer (holding.py), the loop processes beside the worker's own, the bootstep and control commands that
run it in every platform worker, and the task_prerun hook that drops dead database connections."""

# Imports nothing at module level: settings.py and the Celery app import modules below it early.

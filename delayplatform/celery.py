"""The Celery app: configured from Django settings (``CELERY_*``), tasks found in apps."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "delayplatform.settings")

app = Celery("delayplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()  # each installed app's tasks.py
app.autodiscover_tasks(["scheduling.celery"])  # the platform's own: scheduling/celery/tasks.py

# Django's LOGGING applies to the worker too (CELERY_WORKER_HIJACK_ROOT_LOGGER is False); in
# JSON mode Celery's own handlers and banner follow it (delayplatform/logs.py).
from delayplatform.logs import connect_celery  # noqa: E402

connect_celery()


# Platform workers run the delivery loop over every active endpoint's queue.
from scheduling.worker.bootstep import DeliveryLoopStep  # noqa: E402

app.steps["consumer"].add(DeliveryLoopStep)

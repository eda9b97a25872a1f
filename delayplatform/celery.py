"""The Celery app: configured from Django settings (``CELERY_*``), tasks found in apps."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "delayplatform.settings")

app = Celery("delayplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# Platform workers run the delivery loop over every active endpoint's queue.
from scheduling.worker import DeliveryLoopStep  # noqa: E402

app.steps["consumer"].add(DeliveryLoopStep)

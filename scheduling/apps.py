from django.apps import AppConfig
from django.core.management import call_command
from django.db.models.signals import post_migrate


def create_cache_tables(using="default", **kwargs):
    """The API's rate limit keeps its counts in a database cache table; ``migrate`` makes it
    (createcachetable is idempotent), so no deployment needs a step of its own for it."""
    call_command("createcachetable", database=using, verbosity=0)


class SchedulingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "scheduling"
    verbose_name = "Delay platform"

    def ready(self):
        from scheduling.observability.tracing import tracing_start
        from scheduling.retention import checks  # noqa: F401 (registers the system checks)

        if tracing_start():  # on only when the OTEL_* variables ask (docs/observability/tracing.md)
            from scheduling.celery.claim import trace_tasks

            trace_tasks()  # a Celery-queue task's deliver span ends with the task

        from scheduling.celery.claim import order_tasks

        order_tasks()  # an ordered Celery task's end ends its key's turn (messages/ordering.py)
        post_migrate.connect(create_cache_tables, sender=self, dispatch_uid="scheduling.create_cache_tables")

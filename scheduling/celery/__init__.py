"""Celery and the platform. What users import is here, unchanged:

    from scheduling.celery import DelayedTask, cancel_task, schedule_task

(``Celery(..., task_cls="scheduling.celery:DelayedTask")`` works too.) They are defined in
delayed.py; the platform's own tasks are tasks.py (thin: ids in, one service called) with their
names in core/task_names.py, the service that stores a delayed task is services.py, and the hook that
puts every task that comes out of the cascade through the lifecycle is claim.py.
"""

# Import-light on purpose: the Celery app imports modules of this package while it is built;
# the names users import load on first use (PEP 562).

__all__ = ["DelayedTask", "cancel_task", "schedule_task"]


def __getattr__(name: str):
    if name in __all__:
        from scheduling.celery import delayed

        return getattr(delayed, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])

"""What the schedules' tests share: their endpoint (a row on v3, no queue on the broker: these
tests make runs as rows; tests/e2e delivers them), a schedule made with the defaults they use, and
its runs. Imported by name where a module calls the helpers (as tests.conftest's are)."""

import pytest

from scheduling.models import ScheduledMessage
from scheduling.schedules.services import schedule_upsert

KEY = "poll"


@pytest.fixture
def endpoint(endpoint_of):
    return endpoint_of("v3")


def runs(key, **filters) -> list[ScheduledMessage]:
    """The schedule's runs (any status unless filtered), by due time."""
    return list(ScheduledMessage.objects.filter(schedule=key, **filters).order_by("due_at"))


def upsert(endpoint, key=KEY, **kwargs):
    """schedule_upsert of ``key`` on ``endpoint``: payload {"job": key} and runs 7 s apart (none near
    the materialiser's window's end, 60 s) unless given."""
    kwargs.setdefault("payload", {"job": key})
    if "cron" not in kwargs:
        kwargs.setdefault("interval_seconds", 7)
    return schedule_upsert(key=key, endpoint=endpoint.name, **kwargs)

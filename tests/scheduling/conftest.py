"""Rows made directly, for reads (lists, filters, query counts, dashboard figures); the
services that write them are tested on their own and through the admin's actions."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Endpoint, ScheduledMessage


@pytest.fixture
def endpoint_row(versions, endpoint_name):
    """An endpoint row without a queue on the broker: enough for pages that only read rows."""
    return Endpoint.objects.create(name=endpoint_name, topology=versions["v2"])


@pytest.fixture
def make_rows(endpoint_row):
    """make_rows(n, **fields) -> n message rows on endpoint_row (or fields["endpoint"])."""

    def make(n=1, **fields):
        now = timezone.now()
        endpoint = fields.pop("endpoint", endpoint_row)
        defaults = {"payload": {"n": 0}, "due_at": now + timedelta(hours=1), "requested_delay_ms": 3_600_000}
        rows = [
            ScheduledMessage(endpoint=endpoint, topology=endpoint.topology, **{**defaults, "payload": {"n": i}, **fields})
            for i in range(n)
        ]
        return ScheduledMessage.objects.bulk_create(rows)

    return make

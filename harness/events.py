"""An event's messages, made as the events service makes them (docs/concepts/fan-out.md): an Event
row, then one message per endpoint through the scheduling service's own validation and save
(``messages/inputs.py``, ``messages/services.py``: the relay claims them and publishes after the
commit), each naming the event. The tests and the bench of the fan-out use it, so they do not
depend on the events API; with ``deliver_at`` every message of the event shares one due time, as
the service's do."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone


def schedule_event(*, endpoints: list, payload, deliver_at: datetime, topic: str = "bench.event",
                   event: bool = True) -> tuple[object | None, list]:
    """(the Event, its messages) for ``endpoints`` (Endpoint rows, one message each); ``payload``
    a dict, or a function of the endpoint (a Celery queue's message is a task). ``event`` False:
    the same messages with no event (the load "sent as separate messages")."""
    from scheduling.core.clock import ceil_ms
    from scheduling.messages.inputs import message_build
    from scheduling.messages.services import _save  # the service's own steps, an event on each row
    from scheduling.models.events import Event

    now = ceil_ms(timezone.now())
    items = [{"endpoint": endpoint, "payload": payload(endpoint) if callable(payload) else payload,
              "deliver_at": deliver_at} for endpoint in endpoints]
    with transaction.atomic():
        made = Event.objects.create(team=endpoints[0].team, topic=topic, payload=items[0]["payload"], due_at=deliver_at,
                                    message_count=len(endpoints)) if event else None
        rows = [message_build(item=item, endpoints={}, now=now) for item in items]
        for row in rows:
            row.event = made
        results = _save(rows, check_quota=False)
    return made, [result.message for result in results]

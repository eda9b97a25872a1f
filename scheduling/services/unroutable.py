"""Messages the delivery exchange could not route (no queue bound for their destination) are
kept by its alternate exchange in ``<prefix>delay-unroutable``. The drain marks their rows
failed with the reason, then acks; the row holds all it takes to republish them."""

from __future__ import annotations

import logging

from django.utils import timezone

from topology import cascade

from .. import lifecycle, wire
from ..conf import broker
from ..lifecycle import Event
from ..models import ScheduledMessage
from ..selectors.database import topology_version_list_provisioned

log = logging.getLogger(__name__)


def message_mark_unroutable(*, message_id: str, reason: str) -> int:
    """The lifecycle's ``unroutable`` for a message the broker cannot carry to its destination
    (here, or parked by a migration): ``failed`` with the reason, ready to republish."""
    change = lifecycle.unroutable(reason=reason, now=timezone.now())
    return ScheduledMessage.objects.filter(id=message_id, status__in=lifecycle.sources(Event.UNROUTABLE)).update(
        **change)


def _mark_failed(message_id: str, destination: str, prefix: str) -> int:
    return message_mark_unroutable(message_id=message_id, reason=(
        f"unroutable: no queue is bound for {destination!r} on {cascade.delivery_exchange(prefix)} "
        "(queue deleted or unbound); re-bind the endpoint and republish"
    ))


def unroutable_drain(*, limit: int = 1000) -> int:
    """Read each provisioned version's unroutable queue; returns how many rows were marked."""
    marked = 0
    with broker().session() as session:
        for version in topology_version_list_provisioned():
            with session.reader(cascade.unroutable_name(version.prefix)) as reader:
                for message in reader.get(limit):
                    ids = wire.carried_ids(message.headers, message.body)
                    if not ids:  # not one of ours: leave it (unacked) for an operator
                        continue
                    _, destination = cascade.read_route(version.cascade, message.routing_key,
                                                        message.headers.get(cascade.CC_HEADER))
                    updated = sum(_mark_failed(i, destination or message.routing_key, version.prefix) for i in ids)
                    if not updated and not ScheduledMessage.objects.filter(id__in=ids).exists():
                        continue  # no row (yet): keep the message
                    marked += updated
                    reader.ack(message)
            # closing the reader's channel hands back everything left unacked
    if marked:
        log.warning("marked %d unroutable message(s) failed", marked)
    return marked

"""Messages the delivery exchange could not route (no queue bound for their destination) are
kept by its alternate exchange in ``<prefix>delay-unroutable``. The drain marks their rows
failed with the reason, then acks; the row holds all it takes to republish them."""

from __future__ import annotations

import logging

from topology import cascade

from .. import broker, selectors, wire
from ..models import ScheduledMessage

log = logging.getLogger(__name__)


def unroutable_drain(*, limit: int = 1000) -> int:
    marked = 0
    with broker.connected() as conn:
        for version in selectors.topology_versions_provisioned():
            queue = cascade.unroutable_name(version.prefix)
            channel = conn.channel()
            try:
                unknown = []
                for _ in range(limit):
                    message = channel.basic_get(queue)
                    if message is None:
                        break
                    headers = message.headers or {}
                    message_id = headers.get(wire.H_MESSAGE_ID)
                    if not message_id:  # not one of ours: leave it for an operator
                        unknown.append(message.delivery_tag)
                        continue
                    destination = message.delivery_info["routing_key"].rsplit(".", 1)[-1]
                    updated = ScheduledMessage.objects.filter(
                        id=message_id,
                        status__in=[ScheduledMessage.Status.PENDING, ScheduledMessage.Status.PUBLISHED],
                    ).update(
                        status=ScheduledMessage.Status.FAILED,
                        last_error=(
                            f"unroutable: no queue is bound for {destination!r} on "
                            f"{cascade.delivery_exchange(version.prefix)} (queue deleted or unbound); "
                            "re-bind the endpoint and republish"
                        ),
                    )
                    if not updated and not ScheduledMessage.objects.filter(id=message_id).exists():
                        unknown.append(message.delivery_tag)  # no row (yet): keep the message
                        continue
                    marked += updated
                    channel.basic_ack(message.delivery_tag)
                for tag in unknown:
                    channel.basic_reject(tag, requeue=True)
            finally:
                channel.close()
    if marked:
        log.warning("marked %d unroutable message(s) failed", marked)
    return marked

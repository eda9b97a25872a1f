"""RabbitMQ 4.0 gave quorum queues a default delivery limit of 20: a message handed back more often
(its consumer's connection lost while holding it, a reject with requeue, a paused endpoint giving
its hold back, a Celery worker killed mid-task) is dropped, or dead-lettered where the queue has a
dead-letter exchange, which for a level queue means passed on early. The platform promises every
message is delivered, so it keeps 3.x's behaviour in its vhost with a policy of no limit.

Decided from the version the broker reports, never from a setting: on 3.x there is no default
limit, and ``delivery-limit: -1`` there reads as a limit (measured on 3.10.8: a message handed back
once was dropped), so nothing is set. Measured on 4.0.5: without the policy a message handed back
20 times was gone at its 21st; with it, one handed back 30 times was still there.
docs/operations/rabbitmq-versions.md has the figures."""

from __future__ import annotations

import json
import re

from .errors import ManagementUnavailable
from .management import Management

POLICY_NAME = "dp-unlimited-redelivery"
# every quorum queue of the platform's vhost; priority 0, so an operator's own policy for some of
# its queues wins there (and must then carry "delivery-limit": -1 itself: verify says so)
POLICY = {"pattern": ".*", "apply-to": "quorum_queues", "definition": {"delivery-limit": -1}, "priority": 0}
LIMITED_FROM = (4, 0)


def version_tuple(text: str) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(x or 0) for x in match.groups()) if match else None


def limits_redelivery(version: str) -> bool:
    """Whether a broker of this version drops a quorum queue's message handed back too often."""
    found = version_tuple(version)
    return found is not None and found[:2] >= LIMITED_FROM


def fix_command(vhost: str) -> str:
    """What an operator runs where the platform could not set the policy itself."""
    return (f"rabbitmqctl set_policy --vhost {vhost} --apply-to quorum_queues --priority 0 {POLICY_NAME} "
            f"'{POLICY['pattern']}' '{json.dumps(POLICY['definition'])}'")


def redelivery_policy_ensure(*, management: Management, vhost: str, version: str) -> bool:
    """Set the policy where the broker needs it (idempotent); True when it did. Raises
    ManagementUnavailable with the rabbitmqctl line that does the same by hand."""
    if not limits_redelivery(version):
        return False
    try:
        management.put_policy(vhost, POLICY_NAME, POLICY)
    except ManagementUnavailable as exc:
        raise ManagementUnavailable(
            f"RabbitMQ {version} drops a quorum queue's message handed back 20 times, and the platform's policy "
            f"against it could not be set ({exc}); set it with: {fix_command(vhost)}") from None
    return True


def limited_queues(queues: list[dict]) -> list[str]:
    """Quorum queues whose delivery limit is a number (the broker's listing says ``unlimited``
    where none applies; a queue without statistics yet is not counted)."""
    return sorted(q["name"] for q in queues
                  if q.get("type") == "quorum" and isinstance(q.get("delivery_limit"), int))

"""One INFO line per delivery, under the logger ``scheduling.deliveries`` (its level is the
setting LOG_DELIVERIES_LEVEL: WARNING silences it). With LOG_FORMAT=json each line carries
``message_id``, ``endpoint``, ``version``, ``lateness_ms``, ``attempt`` and ``worker`` as fields.

Logged after the batch's commit, so a line means the delivery is recorded. The endpoint and
version names cost one query per batch, made only when the logger is enabled: at thousands of
deliveries a second the lines themselves cost a few percent of a worker's CPU."""

from __future__ import annotations

import logging

from .. import selectors

log = logging.getLogger("scheduling.deliveries")


def deliveries_logged(messages, *, by: str = "") -> None:
    """``messages``: rows just recorded delivered (with ``lateness_ms`` and ``attempts`` loaded)."""
    if not messages or not log.isEnabledFor(logging.INFO):
        return
    routes = selectors.message_routes(m.id for m in messages)
    for message in messages:
        endpoint, version = routes.get(message.id, ("?", "?"))
        log.info("delivered %s to %s (%s), %s ms late", message.id, endpoint, version, message.lateness_ms,
                 extra={"message_id": str(message.id), "endpoint": endpoint, "version": version,
                        "lateness_ms": message.lateness_ms, "attempt": message.attempts, "worker": by})

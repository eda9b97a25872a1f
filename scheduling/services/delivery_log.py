"""One INFO line per delivery, under the logger ``scheduling.deliveries`` (its level is the
setting LOG_DELIVERIES_LEVEL: WARNING silences it), naming the endpoint as ``team/endpoint`` (a
name is unique only within its team). With LOG_FORMAT=json each line carries ``message_id``,
``team``, ``endpoint``, ``version``, ``lateness_ms``, ``attempt`` and ``worker`` as fields.

Written once the batch's transaction commits (never for one rolled back). Team, endpoint and
version names are learnt once per process (a query for ids not seen before), so the delivery
loop's hot path pays no query; at thousands of deliveries a second the lines themselves cost a few
percent of a worker's CPU."""

from __future__ import annotations

import logging

from django.db import DatabaseError, transaction

from ..observability import label_names

log = logging.getLogger("scheduling.deliveries")


def _write(messages, by: str) -> None:
    try:
        label_names.learn(messages)
    except DatabaseError:  # the lines still go out, with ids for names
        pass
    for message in messages:
        team, endpoint, version = label_names.of(message)
        log.info("delivered %s to %s/%s (%s), %s ms late", message.id, team, endpoint, version,
                 message.lateness_ms,
                 extra={"message_id": str(message.id), "team": team, "endpoint": endpoint, "version": version,
                        "lateness_ms": message.lateness_ms, "attempt": message.attempts, "worker": by})


def delivery_log_on_commit(*, messages, by: str = "") -> None:
    """``messages``: rows just recorded delivered (endpoint_id, topology_id, lateness_ms and
    attempts loaded), logged when the current transaction commits (at once outside one)."""
    if messages and log.isEnabledFor(logging.INFO):
        transaction.on_commit(lambda: _write(list(messages), by), robust=True)

"""The deliveries' log, under the logger ``scheduling.deliveries`` (its level is the setting
LOG_DELIVERIES_LEVEL: WARNING silences it), naming endpoints as ``team/endpoint`` (a name is
unique only within its team):

- at INFO, **one line per batch**: how many messages, to which endpoints (how many each), the
  batch's lateness p50 and max, and the worker, e.g. ``delivered 500 messages (shop/orders 300,
  shop/billing 200): lateness p50 4 ms, max 12 ms, worker celery@host``; with LOG_FORMAT=json the
  line carries ``count``, ``endpoints`` ({"team/endpoint": count}), ``lateness_p50_ms``,
  ``lateness_max_ms`` and ``worker`` as fields;
- at DEBUG, also **one line per delivery** (``delivered <id> to shop/orders
  (v3), 4 ms late``, fields ``message_id``, ``team``, ``endpoint``, ``version``, ``lateness_ms``,
  ``attempt`` and ``worker``).

A line per delivery at INFO cost ~17 % of the delivery loop's CPU at thousands a second; a batch
summary costs the same whatever the batch's size. Written once the batch's transaction commits
(never for one rolled back). Team, endpoint and version names are learnt once per process (a
query for ids not seen before), so the delivery loop's hot path pays no query."""

from __future__ import annotations

import logging
from collections import Counter
from typing import NamedTuple

from django.db import DatabaseError, transaction

from scheduling.observability import label_names

log = logging.getLogger("scheduling.deliveries")


class Delivered(NamedTuple):
    """What the log reads of a delivered message (a model row has the same attributes)."""

    id: str
    endpoint_id: int
    topology_id: int
    lateness_ms: int | None
    attempts: int


class _Labelled(NamedTuple):
    endpoint_id: int
    topology_id: int


def _write(messages, by: str) -> None:
    per_label = Counter((m.endpoint_id, m.topology_id) for m in messages)
    keys = [_Labelled(*key) for key in per_label]
    try:
        label_names.learn(keys)
    except DatabaseError:  # the lines still go out, with ids for names
        pass
    if log.isEnabledFor(logging.DEBUG):
        for message in messages:
            team, endpoint, version = label_names.of(message)
            log.debug("delivered %s to %s/%s (%s), %s ms late", message.id, team, endpoint, version,
                      message.lateness_ms,
                      extra={"message_id": str(message.id), "team": team, "endpoint": endpoint, "version": version,
                             "lateness_ms": message.lateness_ms, "attempt": message.attempts, "worker": by})
    endpoints: Counter = Counter()
    for key in keys:
        team, endpoint, _ = label_names.of(key)
        endpoints[f"{team}/{endpoint}"] += per_label[key]
    lateness = sorted(m.lateness_ms for m in messages if m.lateness_ms is not None)
    p50 = lateness[(len(lateness) + 1) // 2 - 1] if lateness else None  # nearest rank
    largest = lateness[-1] if lateness else None
    count = len(messages)
    log.info("delivered %d message%s (%s): lateness p50 %s ms, max %s ms%s", count, "" if count == 1 else "s",
             ", ".join(f"{name} {n}" for name, n in endpoints.most_common()), p50, largest,
             f", worker {by}" if by else "",
             extra={"count": count, "endpoints": dict(endpoints), "lateness_p50_ms": p50,
                    "lateness_max_ms": largest, "worker": by})


def delivery_log_on_commit(*, messages, by: str = "") -> None:
    """``messages``: rows just recorded delivered (id, endpoint_id, topology_id, lateness_ms and
    attempts loaded; model rows or ``Delivered``), logged as one batch when the current
    transaction commits (at once outside one)."""
    if messages and log.isEnabledFor(logging.INFO):
        transaction.on_commit(lambda: _write(list(messages), by), robust=True)

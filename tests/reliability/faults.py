"""Counting what a fault did, from the database of a throwaway platform (harness.platform)."""

from __future__ import annotations

import math

from harness.waiting import wait_until

from .conftest import Counts

OUTCOME_SQL = """
    SELECT m.id::text, m.status, m.delivery_count, m.lateness_ms,
           (m.delivered_at < m.due_at) AS early,
           (SELECT count(*) FROM testapp_receipt r WHERE r.message_id = m.id::text) AS handler_runs
    FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e ON e.id = m.endpoint_id
    WHERE e.name = %s
"""


def schedule(p, endpoint: str, delays: list[float], chunk: int = 500) -> list[str]:
    ids = []
    for start in range(0, len(delays), chunk):
        body = {"messages": [{"endpoint": endpoint, "payload": {"n": start + i}, "delay_seconds": d}
                             for i, d in enumerate(delays[start:start + chunk])]}
        ids += [m["id"] for m in p.api("POST", "/api/messages/bulk/", json=body)["messages"]]
    return ids


def count_status(p, endpoint: str, *statuses: str) -> int:
    return p.count_status(endpoint, *statuses)


def wait_published(p, endpoint: str, total: int, timeout: float) -> None:
    """Until none of the endpoint's ``total`` messages is pending. Counting ``published`` alone
    never got there once scheduling took longer than the shortest delay: the first messages were
    already delivered (make test-cluster's 5,000 on the cluster, issue 22)."""
    wait_until(lambda: count_status(p, endpoint, "published", "delivered") == total, timeout, 0.2, "all published")


def settle(p, endpoint: str, total: int, timeout: float) -> bool:
    """Wait until every message is delivered; False if some never were by the timeout (they are
    counted as lost by outcome(), and every scenario but v1's crash asserts 0 lost)."""
    try:
        wait_until(lambda: count_status(p, endpoint, "delivered") >= total, timeout, 1, "deliveries")
    except AssertionError:
        return False
    return True


HANDLER = {"handler": "celery_task", "handler_target": "testapp.record_receipt"}


def endpoint(p, name: str, **body) -> str:
    """An endpoint whose handler records a receipt per run (duplicates included)."""
    p.api("POST", "/api/endpoints/", json={"name": name, **HANDLER, **body})
    return name


def queue_of(p, name: str) -> str:
    """The endpoint's broker queue (``<team>--<name>``), as the API shows it."""
    return p.api("GET", f"/api/endpoints/{name}/")["queue"]


def wait_receipts(p, endpoint: str, timeout: float = 30) -> None:
    """Handler tasks run just after delivery is recorded: give them a moment to finish."""
    sql = ("SELECT count(*) FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e ON e.id = m.endpoint_id "
           "WHERE e.name = %s AND m.status = 'delivered' AND NOT EXISTS "
           "(SELECT 1 FROM testapp_receipt r WHERE r.message_id = m.id::text)")
    try:
        wait_until(lambda: p.sql(sql, endpoint)[0][0] == 0, timeout, 0.5, "handler receipts")
    except AssertionError:
        pass


def outcome(p, endpoint: str, scenario: str, note: str = "") -> Counts:
    """lost: not delivered, or delivered without the handler ever running (no receipt);
    duplicates to handler: runs beyond the first (the at-least-once window of a crash)."""
    wait_receipts(p, endpoint)
    rows = p.sql(OUTCOME_SQL, endpoint)
    delivered = [r for r in rows if r[1] == "delivered"]
    lateness = sorted(r[3] for r in delivered if r[3] is not None)
    return Counts(
        scenario=scenario,
        messages=len(rows),
        lost=sum(1 for r in rows if r[1] != "delivered" or r[5] == 0),
        duplicates_to_handler=sum(max(0, r[5] - 1) for r in rows),
        duplicates_suppressed=sum(max(0, r[2] - 1) for r in delivered),
        early=sum(1 for r in delivered if r[4]),
        worst_lateness_ms=lateness[-1] if lateness else None,
        p99_lateness_ms=lateness[math.ceil(0.99 * len(lateness)) - 1] if lateness else None,
        note=note,
    )




def why_lost(p, endpoint: str, node=None) -> str:
    """What a failing count means: statuses, deliveries without a handler run, where the broker
    still holds messages, and the workers' warnings (an assertion message, not a figure)."""
    statuses = p.sql("SELECT m.status, count(*) FROM scheduling_scheduledmessage m JOIN scheduling_endpoint e "
                     "ON e.id = m.endpoint_id WHERE e.name = %s GROUP BY 1", endpoint)
    unhandled = sum(1 for r in p.sql(OUTCOME_SQL, endpoint) if r[1] == "delivered" and r[5] == 0)
    queues = node.list_queues() if node is not None else "-"
    warnings = [line for w in p.workers for line in w.log_text().splitlines()[-4000:]
                if " WARNING" in line or " ERROR" in line or "Traceback" in line][-25:]
    return (f"statuses {dict(statuses)}; delivered without a handler run {unhandled}; queues holding messages "
            f"{queues}\n" + "\n".join(warnings))

"""The profiler's evidence for bench/history/: EXPLAIN (ANALYZE, BUFFERS) of the queries the
pages issue, as the platform's code builds them (captured from the selectors, run again under
EXPLAIN): which index each reads, how far, and what it costs at this size of the table."""

from __future__ import annotations

import re

import psycopg

from bench.history.pages import DOMINANT


def captured(call) -> list[str]:
    """The SQL ``call`` runs (parameters inlined, as Django logs them)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        call()
    return [q["sql"] for q in queries.captured_queries]


def statements() -> dict[str, str]:
    """Name -> the statement behind each figure worth explaining."""
    from scheduling.endpoints.selectors import endpoint_count_messages
    from scheduling.messages.dashboard import dashboard_get
    from scheduling.messages.selectors import message_get_page, message_list, message_list_groups
    from scheduling.models import Endpoint, ScheduledMessage, TopologyVersion

    admin_rows = ScheduledMessage.objects.select_related("endpoint", "topology").defer("payload")
    versions = dict(TopologyVersion.objects.values_list("name", "pk"))

    def merged(name, queryset, fixed) -> dict[str, str]:
        """Every range-merging statement of the list's first page: the finished part and the
        in-flight one (explaining only the first hid a walk through every message in flight)."""
        groups = message_list_groups(fixed=fixed)
        found = [sql for sql in captured(lambda: message_get_page(queryset=queryset, groups=groups))
                 if "LATERAL" in sql or "ORDER BY" in sql]
        part = lambda sql: " (in flight)" if "IN ('pending', 'published')" in sql else ""  # noqa: E731
        return {name + part(sql): sql for sql in found}

    endpoint_ids = list(Endpoint.objects.values_list("id", flat=True))
    dominant = Endpoint.objects.filter(name=DOMINANT).values_list("id", flat=True).first()
    return {
        **merged("api: ?endpoint&status=delivered, first page",
                 message_list(endpoint=DOMINANT, status="delivered"), {"endpoint", "status"}),
        **merged("admin: messages, no filter", admin_rows, set()),
        **merged("admin: messages, endpoint (dominant)", admin_rows.filter(endpoint_id=dominant), {"endpoint"}),
        **merged("admin: messages, version v1 (none)", admin_rows.filter(topology_id=versions.get("v1")), {"topology"}),
        "dashboard: capped counts": next(sql for sql in captured(dashboard_get) if "count(*)" in sql),
        "endpoints: counts": next(sql for sql in captured(
            lambda: endpoint_count_messages(endpoint_ids=endpoint_ids)) if "count(*)" in sql),
    }


def plans(database_url: str) -> dict[str, dict]:
    """Name -> {ms, plan (text)}."""
    out = {}
    with psycopg.connect(database_url, autocommit=True) as conn:
        for name, sql in statements().items():
            lines = [row[0] for row in conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}").fetchall()]
            found = re.search(r"Execution Time: ([\d.]+) ms", lines[-1])
            out[name] = {"ms": float(found.group(1)) if found else None, "plan": "\n".join(lines)}
    return out

"""The pages that read the messages table, timed as a client waits for them: the admin's message
list with each filter, its search and next pages, the dashboard, the endpoints pages, the API's
filtered lists and their next pages, a message by id.

    .venv/bin/python -m bench.history.pages --url http://127.0.0.1:8000 --database-url postgres://…/dp_hist \
        --user ops --password … --key … [--repeat 5]

Used by bench/history/ at each size of the table; alone, against any running platform whose
database was filled by bench/history/fill.py (it picks the endpoints, ids and keys to ask for from
the table: the dominant endpoint history-00, the rare history-19). Each page is asked once to warm
up, then --repeat times; the median is the figure. A page slower than --timeout is reported as
such (the figure is then the timeout, a floor)."""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import psycopg
import requests

from bench.admin_changelist import login

DOMINANT, RARE = "history-00", "history-19"
ADMIN_TARGET_MS, API_TARGET_MS = 1000, 300


@dataclass(frozen=True)
class Page:
    name: str
    path: str
    kind: str  # "admin" or "api"
    follow: str | None = None  # "admin-next" / "api-next": time the page its first page links to as next

    @property
    def target_ms(self) -> int:
        return ADMIN_TARGET_MS if self.kind == "admin" else API_TARGET_MS


def facts(database_url: str) -> dict:
    """What the pages ask for, read from the table (cheap lookups only)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        one = lambda sql, *args: (conn.execute(sql, args).fetchone() or (None,))[0]  # noqa: E731
        endpoint_id = {name: one("SELECT id FROM scheduling_endpoint WHERE name = %s", name) for name in (DOMINANT, RARE)}
        version = {name: one("SELECT id FROM scheduling_topologyversion WHERE name = %s", name) for name in ("v1", "v2")}
        message_id = one("SELECT id FROM scheduling_scheduledmessage WHERE endpoint_id = %s AND status = 'delivered' "
                         "ORDER BY created_at DESC LIMIT 1", endpoint_id[DOMINANT]) or one(
            "SELECT id FROM scheduling_scheduledmessage WHERE status = 'delivered' ORDER BY created_at DESC LIMIT 1")
        key = one("SELECT idempotency_key FROM scheduling_scheduledmessage WHERE id = %s", message_id) or "no-such-key"
        day = one("SELECT (now() - interval '3 days')::date")
    return {"endpoint_id": endpoint_id, "version": version, "message_id": message_id, "key": key, "day": day}


def pages(f: dict) -> list[Page]:
    admin = "/admin/scheduling/scheduledmessage/"
    dominant, rare = f["endpoint_id"][DOMINANT], f["endpoint_id"][RARE]
    day = f["day"]
    q = lambda **params: "?" + urlencode(params)  # noqa: E731
    return [
        Page("admin: messages, no filter", admin, "admin"),
        Page("admin: messages, next page", admin, "admin", follow="admin-next"),
        Page("admin: messages, status delivered", admin + q(status__exact="delivered"), "admin"),
        Page("admin: messages, status failed", admin + q(status__exact="failed"), "admin"),
        Page("admin: messages, status pending", admin + q(status__exact="pending"), "admin"),
        Page("admin: messages, due in the past day", admin + q(due="past-day"), "admin"),
        Page("admin: messages, due in the next hour", admin + q(due="next-hour"), "admin"),
        Page("admin: messages, due later than a day", admin + q(due="later"), "admin"),
        Page("admin: messages, scheduled in the past", admin + q(in_past="yes"), "admin"),
        Page("admin: messages, endpoint (dominant)", admin + q(endpoint__id__exact=dominant), "admin"),
        Page("admin: messages, endpoint (rare)", admin + q(endpoint__id__exact=rare), "admin"),
        Page("admin: messages, endpoint + delivered", admin + q(endpoint__id__exact=dominant, status__exact="delivered"),
             "admin"),
        Page("admin: messages, version v2", admin + q(topology__id__exact=f["version"]["v2"]), "admin"),
        Page("admin: messages, version v1 (none)", admin + q(topology__id__exact=f["version"]["v1"]), "admin"),
        Page("admin: messages, due on a day", admin + q(due_at__year=day.year, due_at__month=day.month,
                                                         due_at__day=day.day), "admin"),
        Page("admin: messages, search id", admin + q(q=str(f["message_id"])), "admin"),
        Page("admin: messages, search key", admin + q(q=f["key"]), "admin"),
        Page("admin: messages, sorted by due (o=5)", admin + q(o="5"), "admin"),
        Page("admin: message detail", f"{admin}{f['message_id']}/change/", "admin"),
        Page("admin: dashboard", admin + "dashboard/", "admin"),
        Page("admin: endpoints (counts)", "/admin/scheduling/endpoint/", "admin"),
        Page("api: messages ?endpoint&status=delivered", "/api/messages/" + q(endpoint=DOMINANT, status="delivered"),
             "api"),
        Page("api: same, next page", "/api/messages/" + q(endpoint=DOMINANT, status="delivered"), "api",
             follow="api-next"),
        Page("api: messages ?endpoint (rare)", "/api/messages/" + q(endpoint=RARE), "api"),
        Page("api: messages ?status=failed", "/api/messages/" + q(status="failed"), "api"),
        Page("api: messages, no filter", "/api/messages/", "api"),
        Page("api: message by id", f"/api/messages/{f['message_id']}/", "api"),
        Page("api: endpoints (counts)", "/api/endpoints/", "api"),
    ]


def next_link(page: Page, body: bytes) -> str | None:
    """The next page's path, as the first page links to it (a cursor, or page 2 before cursors)."""
    if page.follow == "api-next":
        link = json.loads(body).get("next")
        return "/" + link.split("://", 1)[1].split("/", 1)[1] if link else None
    found = re.search(r'href="(\?[^"]*(?:cursor|p)=[^"]*)"[^>]*>\s*(?:Older|2)\s*<', body.decode())
    return page.path.split("?")[0] + found.group(1).replace("&amp;", "&") if found else None


SLOW_S = 5.0  # a page this slow on its warm-up is timed once: the figure is that request's


def time_page(session: requests.Session, url: str, repeat: int, timeout: float) -> dict:
    seconds, status, size = [], None, 0
    for i in range(repeat + 1):
        started = time.perf_counter()
        try:
            response = session.get(url, timeout=timeout)
        except requests.Timeout:
            seconds.append(timeout)
            status = "timeout"
            break
        elapsed = time.perf_counter() - started
        status, size = response.status_code, len(response.content)
        if i:  # the first is the warm-up
            seconds.append(elapsed)
        elif elapsed > SLOW_S:
            seconds.append(elapsed)
            break
    return {"median_ms": round(statistics.median(seconds) * 1000, 1), "max_ms": round(max(seconds) * 1000, 1),
            "status": status, "kib": round(size / 1024, 1)}


def measure(*, url: str, database_url: str, admin: requests.Session, key: str, repeat: int = 5,
            timeout: float = 120.0, progress=print) -> dict[str, dict]:
    """Page name -> {median_ms, max_ms, status, kib, target_ms}; ``key``: an API key that sees the
    history endpoints (their team's)."""
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {key}"
    results = {}
    for page in pages(facts(database_url)):
        session = admin if page.kind == "admin" else api
        path = page.path
        if page.follow:
            first = session.get(url + page.path, timeout=timeout)
            path = next_link(page, first.content) or page.path
        figure = time_page(session, url + path, repeat, timeout)
        results[page.name] = {**figure, "target_ms": page.target_ms, "path": path}
        progress(f"    {page.name:45s} {figure['median_ms']:>10,.1f} ms  ({figure['status']})")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.history.pages", description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--key", required=True, help="an API key that may view the history endpoints' messages "
                                                     "(create_api_key --team TEAM --scope read)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    results = measure(url=args.url, database_url=args.database_url, admin=login(args.url, args.user, args.password),
                      key=args.key, repeat=args.repeat, timeout=args.timeout,
                      progress=lambda line: print(line, flush=True))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()

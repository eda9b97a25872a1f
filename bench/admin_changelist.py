"""The admin with 100,000 messages in the table (issue 4): how long each control-room page
takes to render, as an operator's browser would wait for it.

    .venv/bin/python -m bench.admin_changelist [--messages 100000] [--repeat 10]

A throwaway platform (own database, vhost, gunicorn) gets a few endpoints through the API, then
N message rows in one INSERT (mixed statuses, due times over +-2 days, lateness on delivered
rows, a 200-byte payload each). A logged-in session requests each page once to warm up, then
--repeat times; the figures are wall-clock times on the client, HTML only."""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time

import psycopg
import requests

from bench.measure import idle_share
from harness.paths import ARTIFACTS
from harness.platform import platform

ENDPOINTS = ("billing", "reminders", "reports", "webhooks-out", "cleanup")
INSERT_SQL = """
    INSERT INTO scheduling_scheduledmessage
      (id, endpoint_id, topology_id, payload, due_at, requested_delay_ms, status, routing_key, first_exchange,
       created_at, published_at, delivered_at, cancelled_at, lateness_ms, delivery_count, attempts,
       idempotency_key, last_error)
    SELECT gen_random_uuid(), e.id, e.topology_id,
           jsonb_build_object('n', i, 'note', repeat('x', 180)),
           due, 60000, s.status, '', '', due - interval '1 minute',
           CASE WHEN s.status IN ('published', 'delivered', 'failed') THEN due - interval '59 seconds' END,
           CASE WHEN s.status = 'delivered' THEN due + (i %% 40) * interval '1 millisecond' END,
           CASE WHEN s.status = 'cancelled' THEN due - interval '30 seconds' END,
           CASE WHEN s.status = 'delivered' THEN i %% 40 END,
           CASE WHEN s.status = 'delivered' THEN 1 ELSE 0 END, 0,
           'key-' || i, CASE WHEN s.status = 'failed' THEN 'unroutable: bench' ELSE '' END
    FROM generate_series(1, %s) AS i
    CROSS JOIN LATERAL (SELECT now() + ((i %% 5760) - 2880) * interval '1 minute' AS due) d
    CROSS JOIN LATERAL (SELECT CASE
        WHEN d.due > now() THEN (ARRAY['pending', 'published', 'published', 'cancelled'])[1 + i %% 4]
        ELSE (ARRAY['delivered', 'delivered', 'delivered', 'failed', 'cancelled'])[1 + i %% 5] END AS status) s
    JOIN (SELECT id, topology_id, row_number() OVER (ORDER BY id) - 1 AS k FROM scheduling_endpoint) e
      ON e.k = i %% %s
"""


def login(url: str, username: str, password: str) -> requests.Session:
    session = requests.Session()
    page = session.get(f"{url}/admin/login/", timeout=30).text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = session.post(f"{url}/admin/login/?next=/admin/", timeout=30, headers={"Referer": f"{url}/admin/login/"},
                            data={"csrfmiddlewaretoken": token, "username": username, "password": password})
    assert "Log out" in response.text or "log out" in response.text.lower(), "login failed"
    return session


def timed(session: requests.Session, url: str, repeat: int) -> dict:
    first = session.get(url, timeout=60)
    first.raise_for_status()
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        session.get(url, timeout=60).raise_for_status()
        seconds.append(time.perf_counter() - started)
    seconds.sort()
    return {"median_ms": round(statistics.median(seconds) * 1000, 1),
            "p90_ms": round(seconds[max(0, int(len(seconds) * 0.9) - 1)] * 1000, 1),
            "max_ms": round(seconds[-1] * 1000, 1), "html_kib": round(len(first.content) / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    with platform(web_workers=2) as p:
        for name in ENDPOINTS:
            p.api("POST", "/api/endpoints/", json={"name": name})
        started = time.perf_counter()
        with psycopg.connect(p.env["DATABASE_URL"], autocommit=True) as conn:
            conn.execute(INSERT_SQL, (args.messages, len(ENDPOINTS)))
            conn.execute("ANALYZE scheduling_scheduledmessage")
        load_s = time.perf_counter() - started
        total = p.sql("SELECT count(*) FROM scheduling_scheduledmessage")[0][0]
        some_id = p.sql("SELECT id FROM scheduling_scheduledmessage WHERE status = 'delivered' LIMIT 1")[0][0]
        v2 = p.sql("SELECT id FROM scheduling_topologyversion WHERE name = 'v2'")[0][0]
        session = login(p.url, "bench", "x")
        base = f"{p.url}/admin/scheduling"
        pages = {
            "messages list": f"{base}/scheduledmessage/",
            "messages list, status=delivered": f"{base}/scheduledmessage/?status__exact=delivered",
            "messages list, due in the next hour": f"{base}/scheduledmessage/?due=next-hour",
            "messages list, endpoint + version": f"{base}/scheduledmessage/?endpoint__id__exact=1&topology__id__exact={v2}",
            "messages list, page 1,000": f"{base}/scheduledmessage/?p=1000",
            "messages list, search idempotency key": f"{base}/scheduledmessage/?q=key-54321",
            "messages list, search id": f"{base}/scheduledmessage/?q={some_id}",
            "message detail": f"{base}/scheduledmessage/{some_id}/change/",
            "endpoints list (counts by status)": f"{base}/endpoint/",
            "dashboard": f"{base}/scheduledmessage/dashboard/",
            "topology v2 detail (broker depths)": f"{base}/topologyversion/{v2}/change/",
        }
        idle = idle_share()
        figures = {name: timed(session, url, args.repeat) for name, url in pages.items()}
    width = max(map(len, figures))
    print(f"\nadmin pages with {total:,} messages (loaded in {load_s:.1f} s; CPU idle before timing {idle:.0%}); "
          f"{args.repeat} requests each after a warm-up, HTML only")
    print(f"{'page'.ljust(width)}  median ms  p90 ms  max ms   html")
    for name, f in figures.items():
        print(f"{name.ljust(width)}  {f['median_ms']:6.1f}  {f['p90_ms']:6.1f}  {f['max_ms']:7.1f}  {f['html_kib']:5.1f} KiB")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / f"bench-admin-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"messages": total, "repeat": args.repeat, "idle_share": idle, "pages": figures},
                              indent=2))
    print(f"\nJSON: {out}")


if __name__ == "__main__":
    main()

"""PostgreSQL restored from a backup while messages are in flight (the runbook of
docs/operations/backup-and-restore.md, run against a real platform: gunicorn, a Celery worker with
its delivery loop, a private RabbitMQ node, the test's own database).

Batch A is scheduled, the database backed up (pg_dump), batch B scheduled; part of A (the early
ones) is delivered to a recording webhook receiver; the worker is stopped, the database restored
from the backup (dropped, created, pg_restore), the worker started again and
``reconcile_after_restore`` run. Then:

- every A message is delivered (0 lost); those delivered after the backup was taken are in flight
  again in the restored database with their copies consumed: the command publishes them again and
  they arrive a second time -- exactly those, with the same ``webhook-id`` (receivers dedupe on it);
- no B message is delivered: their copies arrive with no row and are set aside (orphan copies),
  every one of them, each with its queue, endpoint, team and due time -- the webhook endpoint's
  (the loop's webhook path) and a record-only endpoint's (its set-based path).

The rescue is off in the worker (DELAY_RESCUE_AFTER_MS 0): what is republished is the command's doing.
"""

import re
import subprocess
import time
from collections import Counter

import psycopg
import pytest

from harness.database import PG
from harness.platform import platform
from harness.recording_server import RecordingServer
from harness.waiting import wait_until
from scheduling.config.conf import setting_name

from .conftest import Counts, size

pytestmark = [pytest.mark.broker, pytest.mark.e2e]
NAME, RECORDED = "restored", "recorded"  # a webhook endpoint, and a record-only one (the loop's set-based path)


def schedule(p, delays: list[float], endpoint: str = NAME) -> list[str]:
    body = {"messages": [{"endpoint": endpoint, "payload": {"n": n}, "delay_seconds": d}
                         for n, d in enumerate(delays)]}
    return [m["id"] for m in p.api("POST", "/api/messages/bulk/", json=body)["messages"]]


def statuses(p, ids: list[str]) -> Counter:
    return Counter(dict(p.sql("SELECT status, count(*) FROM scheduling_scheduledmessage WHERE id::text = ANY(%s) "
                              "GROUP BY 1", ids)))


def calls(hooks: RecordingServer) -> Counter:
    """Calls per webhook-id (the message id, the same on every copy: what a receiver dedupes on)."""
    return Counter({k.lower(): v for k, v in r["headers"].items()}["webhook-id"] for r in list(hooks.requests))


def orphans(p) -> dict[str, tuple]:
    return {r[0]: r[1:] for r in p.sql("SELECT o.message_id, o.queue, e.name, t.name, o.due_at IS NOT NULL "
                                       "FROM scheduling_orphancopy o LEFT JOIN scheduling_endpoint e "
                                       "ON e.id = o.endpoint_id LEFT JOIN scheduling_team t ON t.id = o.team_id")}


def restore(p, dump: str) -> float:
    """Drop the database (its sessions ended), create it again and pg_restore the dump: seconds."""
    started, database = time.monotonic(), p.env["DATABASE_URL"].rsplit("/", 1)[1]
    p.close()  # the test's own connection would be ended by the drop
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')
    subprocess.run(["pg_restore", "--no-owner", "--exit-on-error", "-d", p.env["DATABASE_URL"], dump], check=True,
                   capture_output=True, timeout=120)
    return time.monotonic() - started


def test_restore_from_backup_with_messages_in_flight(tmp_path, report):
    n_early, n_late, n_b = size(200, 40), size(200, 40), size(200, 40)
    rescue_off = {setting_name("rescue_after_ms"): "0"}
    with RecordingServer() as hooks, platform(web_workers=1, settings="delayplatform.settings_test") as p:
        queue = p.api("POST", "/api/endpoints/", json={"name": NAME, "topology": "v3", "handler": "webhook",
                                                       "handler_target": hooks.url})["queue"]
        recorded_queue = p.api("POST", "/api/endpoints/", json={"name": RECORDED, "topology": "v3"})["queue"]
        p.start_worker(concurrency=1, **rescue_off)
        early = schedule(p, [3 + n * 1.5 / n_early for n in range(n_early)])  # due in 3-4.5 s
        late = schedule(p, [24 + n * 3 / n_late for n in range(n_late)])  # due in 24-27 s
        wait_until(lambda: statuses(p, early + late)["pending"] == 0, 30, 0.1, "batch A published")
        dump = str(tmp_path / "backup.dump")
        started = time.monotonic()
        subprocess.run(["pg_dump", "-Fc", "-f", dump, p.env["DATABASE_URL"]], check=True, capture_output=True,
                       timeout=60)
        dump_s = time.monotonic() - started
        b = schedule(p, [15 + n * 3 / n_b for n in range(n_b)])  # due in 15-18 s: after the restore
        b_recorded = schedule(p, [15 + n * 3 / n_b for n in range(n_b // 4)], RECORDED)
        wait_until(lambda: statuses(p, b + b_recorded)["pending"] == 0, 30, 0.1, "batch B published")
        wait_until(lambda: statuses(p, early)["delivered"] == n_early and len(calls(hooks)) >= n_early, 30, 0.2,
                   "the early part of A delivered")
        p.workers[0].stop()
        called_before = calls(hooks)
        assert not set(called_before) & set(b + late), "B or late A fell due before the worker stopped"
        restore_s = restore(p, dump)
        # what the backup says of A: delivered at the backup's time (they arrive once) or in flight
        in_flight_again = {i for (i,) in p.sql("SELECT id::text FROM scheduling_scheduledmessage WHERE status = "
                                               "'published' AND id::text = ANY(%s)", early)} & set(called_before)
        assert not statuses(p, b + b_recorded), "batch B has rows in the restored database"
        p.start_worker(concurrency=1, **rescue_off)
        started = time.monotonic()
        printed = p.manage("reconcile_after_restore", "--overdue-after", "1s", "--no-progress", "--compare-broker")
        reconcile_s = time.monotonic() - started
        wait_until(lambda: all(calls(hooks)[i] == 2 for i in in_flight_again), 30, 0.05, "the republished arrive")
        second_s = time.monotonic() - started - reconcile_s
        wait_until(lambda: statuses(p, early + late)["delivered"] == n_early + n_late, 60, 0.25,
                   "every A message delivered")
        again_s = time.monotonic() - started
        wait_until(lambda: len(orphans(p)) == n_b + len(b_recorded), 60, 0.25, "every B copy set aside")
        wait_until(lambda: not hooks.in_flight, 10, 0.1, "the receiver idle")
        time.sleep(1)  # a straggling call would show now
        seen, kept, final = calls(hooks), orphans(p), statuses(p, early + late)
    twice = {i for i, n in seen.items() if n == 2}
    republished = re.search(r"^\s*republished\s+([\d,]+) ", printed, re.M)
    print(f"\nrestore from backup: A {n_early + n_late} ({n_early} delivered after the backup, before the restore), "
          f"B {n_b + len(b_recorded)} (scheduled after the backup); pg_dump {dump_s:.2f} s, restore {restore_s:.2f} s, reconcile "
          f"{reconcile_s:.2f} s (a manage.py process), the republished called again {second_s:.2f} s after it, "
          f"every A delivered {again_s:.1f} s after it started (the last due then); "
          f"delivered twice {len(twice)} (expected {len(in_flight_again)}), B set aside {len(kept)} "
          f"({len(b_recorded)} of a record-only endpoint), B delivered "
          f"{sum(1 for i in b if i in seen)}\n{printed}")
    all_b = set(b + b_recorded)
    report(Counts(scenario="restore from backup (A before it, B after it)", messages=n_early + n_late + len(all_b),
                  lost=n_early + n_late - final["delivered"] + len(all_b - set(kept)),
                  duplicates_to_handler=len(twice), duplicates_suppressed=0, early=0, worst_lateness_ms=None,
                  note=f"{len(twice)} twice = those delivered after the backup; B: {len(kept)} set aside"))
    assert final["delivered"] == n_early + n_late  # 0 lost
    assert in_flight_again, "no A message was delivered between the backup and the restore: nothing tested"
    assert twice == in_flight_again  # exactly those delivered after the backup arrive twice (webhook-id the same)
    assert all(seen[i] == 1 for i in set(early + late) - in_flight_again)
    assert max(seen.values()) <= 2
    assert not set(b) & set(seen)  # no B message delivered blind
    assert set(kept) == set(b + b_recorded)  # every B copy set aside, nothing else
    assert {kept[i][:3] for i in b} == {(queue, NAME, "bench")} and all(v[3] for v in kept.values())
    assert {kept[i][:3] for i in b_recorded} == {(recorded_queue, RECORDED, "bench")}
    assert republished and int(republished[1].replace(",", "")) == len(in_flight_again), printed

"""`make soak`: the platform as `make run` deploys it, under a steady load for SOAK_MINUTES (60),
with retention in minutes so the prune runs throughout, the worker SIGKILLed every sixth of the
run (10 minutes of an hour) and its RabbitMQ node stopped and started once. A row every twelfth
of the run (5 minutes): scheduled, delivered, lost, early, lateness p99, and what must stay flat
(memory, file descriptors, connections, the table's heap and indexes, its live rows and vacuum passes).
At the end, after the last messages are due, a verdict: 0 lost, 0 early, every resource flat (the
last half of the rows within 10 % of the first row after warm-up), the table at a plateau (its heap
and its indexes apart, against the vacuum cycles that ran over them: tests/reliability/soak/plateau.py); the
exit code is 1 if a target is missed.

Settings (environment): SOAK_MINUTES (60), SOAK_RATE (300 messages/s), SOAK_MAX_DELAY (5m; delays
are uniform from 1 s), SOAK_CANCEL_SHARE (0.05), SOAK_RETENTION (2m, DELAY_RETENTION), SOAK_PRUNE_EVERY
(1m, DELAY_PRUNE_EVERY). See docs/operations/reliability.md, "Soak"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import psycopg
import requests

from bench.measure import percentiles
from tests.reliability.soak.deploy import Deployment, deployed, keep_logs
from tests.reliability.soak.ledger import Ledger, Outcome, judge, read_snapshot
from tests.reliability.soak.load import Load
from tests.reliability.soak.plateau import INDEX_SETTLE, judge_bound, judge_plateau, series
from tests.reliability.soak.probes import DatabaseFigures, broker_totals, disk_bytes, tree_fds, tree_rss_bytes
from tests.reliability.soak.rules import (
    Plan,
    SoakConfigError,
    Verdict,
    clock,
    count,
    human_bytes,
    judge_flat,
    plan_from_env,
)

LOST_AFTER_S = 120  # a row counts a message as lost once it is this overdue (the verdict waits for all)
SETTLE_EXTRA_S = 300  # after the last message is due, how long the verdict waits for stragglers


@dataclass
class Row:
    at_s: float
    scheduled: int
    delivered: int
    cancelled: int
    lost: int
    early: int
    p99_ms: int | None
    worker_rss: int
    web_rss: int
    worker_fds: int
    web_fds: int
    connections: int
    channels: int
    pg_connections: int
    table_bytes: int  # heap + indexes
    heap_bytes: int  # the table without its indexes (heap, TOAST, free-space and visibility maps)
    index_bytes: int
    rows_live: int
    rows_dead: int
    vacuums: int  # VACUUM passes so far (the soak's own, before the rows Plan.vacuum_rows names)
    autovacuums: int  # autovacuum passes so far
    archive_bytes: int
    outbox: int
    events: str = ""
    index_each: dict[str, int] = field(default_factory=dict)  # each index's size (not printed per row)
    autovacuum_age_s: float | None = None  # since the last autovacuum pass ended

    @property
    def passes(self) -> int:
        return self.vacuums + self.autovacuums


HEADER = ["time", "scheduled", "delivered", "cancelled", "lost", "early", "lateness p99", "worker RSS", "web RSS",
          "fds worker/web", "broker conn/ch", "PG conn", "heap/indexes", "rows live/dead", "vacuums soak/auto",
          "archive", "outbox", "events since last row"]


def resources(plan: Plan) -> list[tuple[str, str, float, object]]:
    """(name, Row field, slack, format) of every figure that must stay flat. The outbox's base is
    about 0: a row may catch requests between their commit and their publish, so it may hold up to
    a second's messages (a broker that is away leaves thousands)."""
    return [("worker RSS", "worker_rss", 0, human_bytes), ("web RSS", "web_rss", 0, human_bytes),
            ("worker fds", "worker_fds", 0, count), ("web fds", "web_fds", 0, count),
            ("broker connections", "connections", 0, count), ("broker channels", "channels", 0, count),
            ("PostgreSQL connections", "pg_connections", 0, count),
            ("outbox depth", "outbox", plan.rate, count)]


def format_row(row: Row) -> str:
    cells = [clock(row.at_s), f"{row.scheduled:,}", f"{row.delivered:,}", f"{row.cancelled:,}", str(row.lost),
             str(row.early), "-" if row.p99_ms is None else f"{row.p99_ms:,} ms", human_bytes(row.worker_rss),
             human_bytes(row.web_rss), f"{row.worker_fds}/{row.web_fds}", f"{row.connections}/{row.channels}",
             str(row.pg_connections), f"{human_bytes(row.heap_bytes)}/{human_bytes(row.index_bytes)}",
             f"{row.rows_live:,}/{row.rows_dead:,}", f"{row.vacuums}/{row.autovacuums}",
             human_bytes(row.archive_bytes), str(row.outbox),
             row.events or "-"]
    return "| " + " | ".join(cells) + " |"


def table_header() -> str:
    return "| " + " | ".join(HEADER) + " |\n|" + "---|" * len(HEADER)


@dataclass
class Result:
    plan: Plan
    rows: list[Row]
    final: Outcome | None
    verdict: Verdict
    info: list[str] = field(default_factory=list)
    settle_s: float = 0.0


class Sampler:
    """One row: the outcome of every accepted message so far (table + archive in one snapshot),
    then the figures of the processes, the broker and the database."""

    def __init__(self, d: Deployment, ledger: Ledger):
        self.d, self.ledger = d, ledger
        self.figures = DatabaseFigures(d.database_url)
        self.snapshot_conn = psycopg.connect(d.database_url)
        self.last = datetime.now(timezone.utc)

    def outcome(self, *, overdue_before: datetime, window=None) -> Outcome:
        accepted, cancelled = self.ledger.ids(), self.ledger.cancelled_ids()  # before the snapshot: all committed
        snapshot, _ = read_snapshot(self.snapshot_conn, self.d.archive_dir)
        return judge(snapshot, accepted, cancelled, overdue_before=overdue_before, window=window)

    def row(self, at_s: float, events: str) -> Row:
        now = datetime.now(timezone.utc)
        o = self.outcome(overdue_before=now - timedelta(seconds=LOST_AFTER_S), window=(self.last, now))
        self.last = now
        connections, channels = broker_totals(self.d.node.management_url)
        heap, indexes, each = self.figures.relation_bytes()
        live, dead = self.figures.rows()
        vacuums = self.figures.vacuums()
        return Row(at_s, o.rows - o.unknown, o.delivered, o.cancelled, o.overdue, o.early,
                   percentiles(o.window_lateness_ms)["p99"], tree_rss_bytes(self.d.worker.process.pid),
                   tree_rss_bytes(self.d.web.pid), tree_fds(self.d.worker.process.pid), tree_fds(self.d.web.pid),
                   connections, channels, self.figures.connections(), heap + indexes, heap, indexes, live, dead,
                   vacuums.manual, vacuums.auto, disk_bytes(self.d.archive_dir), self.figures.outbox(), events,
                   each, vacuums.auto_age_s)

    def close(self) -> None:
        self.figures.close()
        self.snapshot_conn.close()


def describe(plan: Plan) -> str:
    kills = ", ".join(clock(t) for t in plan.kill_times) or "never"
    restart = clock(plan.restart_at) if plan.restart_at else "never"
    return (f"soak: {plan.minutes:g} min at {plan.rate} messages/s (delays {plan.min_delay_s:g}-{plan.max_delay_s:g} s, "
            f"{plan.cancel_share:.0%} cancelled), retention {plan.retention_s:g} s, prune every {plan.prune_every_s:g} s; "
            f"worker SIGKILLed at {kills}; RabbitMQ stopped and started at {restart}; the table VACUUMed before the "
            f"rows at {', '.join(clock(plan.sample_times[i]) for i in plan.vacuum_rows)}; a row every "
            f"{clock(plan.sample_every_s)} (min:s after the load starts)")


def say_now(text: str) -> None:
    print(text, flush=True)  # rows appear as they are taken, also into a file (nohup)


def run(plan: Plan, say=say_now) -> Result:
    """Deploy, drive, judge, remove. A SIGTERM is taken as Ctrl-C (in the main thread), so
    everything started is removed then too."""
    run_id = uuid.uuid4().hex[:8]
    say(describe(plan))
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _interrupted)
        try:
            return _run(plan, run_id, say)
        finally:
            signal.signal(signal.SIGTERM, previous)
    return _run(plan, run_id, say)


def _run(plan: Plan, run_id: str, say) -> Result:
    with deployed(plan, run_id, say) as d:
        ledger = Ledger()
        load = Load(plan, d.url, d.key, d.endpoints, ledger)
        sampler = Sampler(d, ledger)
        result = None
        try:
            result = _drive(plan, d, load, ledger, sampler, say)
            return result
        finally:
            load.stop()
            sampler.close()
            if result is not None and not result.verdict.ok:
                keep_logs(d.workdir, d.run_id, say)


def _drive(plan: Plan, d: Deployment, load: Load, ledger: Ledger, sampler: Sampler, say) -> Result:
    events = sorted([(t, "row") for t in plan.sample_times] + [(t, "kill") for t in plan.kill_times]
                    + ([(plan.restart_at, "restart")] if plan.restart_at else []))
    rows, notes = [], []
    say(f"soak: platform at {d.url}, endpoints {', '.join(d.endpoints)}; load starts now\n")
    say(table_header())
    load.start()
    for at, kind in events:
        time.sleep(max(0.0, load.started + at - time.monotonic()))
        if kind == "kill":
            notes.append(f"worker SIGKILLed at {clock(at)}, ready again in {d.kill_worker():.0f} s")
        elif kind == "restart":
            notes.append(f"RabbitMQ stopped at {clock(at)}, back in {d.restart_broker():.0f} s")
        else:  # at the time it is taken: a fault that ran over its row's time delays the row
            if len(rows) in plan.vacuum_rows:
                notes.append(f"VACUUM by the soak ({sampler.figures.vacuum():.1f} s)")
            rows.append(sampler.row(time.monotonic() - load.started, "; ".join(notes)))
            notes = []
            say(format_row(rows[-1]))
    load.stop_scheduling()
    say(f"\nsoak: load stopped ({ledger.scheduled:,} accepted, {load.achieved_rate():.0f}/s); waiting for the last "
        f"messages to fall due and be delivered or cancelled (up to {plan.max_delay_s + SETTLE_EXTRA_S:g} s)")
    started = time.monotonic()
    deadline = started + plan.max_delay_s + SETTLE_EXTRA_S
    while time.monotonic() < deadline and (sampler.figures.unsettled() or load.cancels_waiting()):
        time.sleep(2)
    settle_s = time.monotonic() - started
    settled = not sampler.figures.unsettled() and not load.cancels_waiting()
    time.sleep(1)  # a cancel in flight when the last one was taken
    final = sampler.outcome(overdue_before=datetime.now(timezone.utc))
    result = Result(plan, rows, final, verdict(plan, rows, final, load, ledger, settled, settle_s), settle_s=settle_s)
    result.info = info(plan, rows, load, ledger, final)
    say("\n".join(["", "soak verdict:", *result.verdict.lines(), *result.info]))
    return result


def verdict(plan: Plan, rows: list[Row], final: Outcome, load: Load, ledger: Ledger, settled: bool,
            settle_s: float) -> Verdict:
    v = Verdict()
    accepted = ledger.scheduled
    v.add("0 lost", final.not_finished == 0 and settled,
          f"{final.not_finished:,} of {accepted:,} accepted messages neither delivered nor cancelled in the table or "
          f"the archive (missing from both {final.missing}, failed {final.failed}, still waiting {final.unfinished}) "
          f"{settle_s:.0f} s after the load stopped" + ("" if settled else ", NOT settled"))
    v.add("0 early", final.early == 0, f"{final.early:,} of {final.delivered:,} delivered before due")
    answers = ledger.cancel_answers
    v.add("cancels honoured", final.delivered_after_cancel == 0,
          f"{final.delivered_after_cancel} delivered after a cancel answered 200; cancels answered 200: "
          f"{answers.get('200', 0):,}, 409 (the delivery won the race; counted delivered): {answers.get('409', 0):,}, "
          f"404: {answers.get('404', 0):,}, other: {sum(n for k, n in answers.items() if k not in ('200', '409', '404'))}")
    v.add("every message once", final.duplicates == 0 and final.unknown == 0,
          f"{final.rows:,} rows in the table and the archive for {accepted:,} accepted; {final.duplicates} in both "
          f"or archived twice, {final.unknown} the driver never saw accepted")
    base, judged = plan.base_index, plan.judged_indices
    for name, attr, slack, fmt in resources(plan):
        j = judge_flat(name, [getattr(r, attr) for r in rows], base, judged, slack=slack)
        v.add(f"{name} flat", j.ok, j.describe(fmt))
    for name, p in plateaus(plan, rows).items():
        v.add(name, p.ok, p.describe(human_bytes if name != "live rows bounded" else count))
    return v


def plateaus(plan: Plan, rows: list[Row]) -> dict:
    """The table's plateau (tests/reliability/soak/plateau.py): its live rows bounded, then its heap and its
    indexes each against the vacuum cycles that ran over them."""
    base, live, passes = plan.base_index, [r.rows_live for r in rows], [r.passes for r in rows]
    return {
        "live rows bounded": judge_bound("live rows", live, base, plan.table_bound),
        "table heap plateaus": judge_plateau("heap", [r.heap_bytes for r in rows], live, passes, base,
                                             tolerance=plan.table_tolerance, bound=plan.table_bound),
        "table indexes plateau": judge_plateau("indexes", [r.index_bytes for r in rows], live, passes, base,
                                               settle=INDEX_SETTLE, tolerance=plan.table_tolerance,
                                               bound=plan.table_bound),
    }


def info(plan: Plan, rows: list[Row], load: Load, ledger: Ledger, final: Outcome) -> list[str]:
    base = plan.base_index
    lines = [
        f"  base row: {base + 1} ({clock(plan.sample_times[base])}), the first at or after the warm-up of "
        f"{clock(plan.warm_up_s)} (twice the longest stay of a message in the table: delay {plan.max_delay_s:g} s + "
        f"retention {plan.retention_s:g} s + 2 prune periods of {plan.prune_every_s:g} s; the rows reach their "
        f"steady mix after one, the indexes their steady size after two); judged: rows "
        f"{plan.judged_indices[0] + 1}-{plan.judged_indices[-1] + 1}, the last half",
        f"  load: {ledger.scheduled:,} accepted at {load.achieved_rate():.0f}/s of {plan.rate}/s asked; API errors: "
        f"{sum(load.errors.values())} {load.errors or ''}".rstrip(),
        *[f"    {e}" for e in load.first_errors],
    ]
    lag = percentiles(load.cancel_lag_s, points=(50, 99))
    if lag["max"] is not None:
        lines.append(f"  cancels sent after their planned moment by p50 {lag['p50']:.2f} s, p99 {lag['p99']:.2f} s, max "
                     f"{lag['max']:.2f} s (late ones race the delivery more often: 409)")
        if lag["p50"] > 1:
            lines.append("  WARNING: the cancels fell behind (one request each, served by the same web workers as the "
                         "bulk requests); a lower SOAK_CANCEL_SHARE keeps them on time")
    if len(rows) > base + 1:
        grown = rows[-1].archive_bytes - rows[base].archive_bytes
        span_h = (rows[-1].at_s - rows[base].at_s) / 3600
        lines.append(f"  archive (history, grows by design until DELAY_ARCHIVE_RETENTION): "
                     f"{human_bytes(grown / span_h)} an hour after warm-up, {final.delivered + final.cancelled:,} "
                     f"finished messages in all")
    passes = [r.passes for r in rows]
    lines.append("  the table per row (* a vacuum pass completed since the row before, | the warm-up ends): heap (MB) "
                 + series([r.heap_bytes for r in rows], passes, base, megabytes))
    lines.append(f"    indexes (MB) {series([r.index_bytes for r in rows], passes, base, megabytes)}")
    lines.append(f"    live rows {series([r.rows_live for r in rows], passes, base, count)}")
    if len(rows) > base:
        first, last = rows[base], rows[-1]
        auto = last.autovacuums - rows[base - 1].autovacuums if base else last.autovacuums
        ago = "" if last.autovacuum_age_s is None else f", the last ended {clock(last.autovacuum_age_s)} before the last row"
        lines.append(f"  vacuum passes from the base row on: {last.vacuums - (rows[base - 1].vacuums if base else 0)} "
                     f"VACUUM by the soak (before rows {', '.join(str(i + 1) for i in plan.vacuum_rows)}), "
                     f"{auto} autovacuum{ago}; dead row versions at the last row {last.rows_dead:,}")
        grown = sorted(first.index_each, key=lambda n: last.index_each.get(n, 0) - first.index_each[n], reverse=True)
        lines.append("  each index, base row -> last: " + ", ".join(
            f"{n} {human_bytes(first.index_each[n])} -> {human_bytes(last.index_each.get(n, 0))}" for n in grown))
    late = [r.p99_ms for r in rows[base:] if r.p99_ms is not None]
    if late:
        lines.append(f"  lateness p99 per row after warm-up: {min(late):,}-{max(late):,} ms")
    if plan.rate > load.achieved_rate() * 1.05:
        lines.append(f"  WARNING: the load fell behind its rate ({load.achieved_rate():.0f}/s of {plan.rate}/s)")
    return lines


def megabytes(value: float) -> str:
    return f"{value / 1e6:.2f}"


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def main() -> int:
    try:
        plan = plan_from_env(os.environ)
    except SoakConfigError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    try:
        result = run(plan)
    except KeyboardInterrupt:
        print("\nsoak: interrupted; what it started was stopped and removed", file=sys.stderr)
        return 130
    except (RuntimeError, AssertionError, OSError, psycopg.Error, requests.RequestException,
            subprocess.SubprocessError) as exc:
        print(f"soak: failed: {str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__}",
              file=sys.stderr)
        return 1
    if not result.verdict.ok:
        print(f"soak: MISSED {', '.join(result.verdict.missed)}", file=sys.stderr)
        return 1
    say_now("soak: every target met")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What bench/history/ measures at each size of the history: the bulk scheduling rate (and the
raw publisher's beside it), idle lateness, delivered throughput, and the bytes a message costs.
Each case schedules through the platform's API and reads the outcome from its database, as
`make bench`'s cases do (whose Bench, bench/cases/base.py, gives the endpoints, the bulk requests
and the lateness)."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from datetime import datetime, timedelta, timezone

from bench.cases.idle import idle_delays
from bench.measure import percentiles
from harness.waiting import wait_until

TABLE = "scheduling_scheduledmessage"
IN_FLIGHT_DAYS = 3  # the rate case's messages stay published (in the cascade) for the whole run
STEADY_ROWS = 1000 * 86400 * 7  # 1,000 messages a second kept 7 days
# partial indexes of messages in flight (scheduling/models/messages.py): their size follows the messages in
# flight, not the history
IN_FLIGHT_ONLY = ("message_endpoint_in_flight", "message_in_flight_due", "message_timeouts_due")


class Cases:
    def __init__(self, bench):
        self.b, self.p = bench, bench.p  # bench.cases.base.Bench on the run's platform

    # --- scheduling rate -------------------------------------------------------------------------

    def scheduling_rate(self, n: int, runs: int) -> dict:
        """Bulk API (4 clients, 1,000 a request) -> rows durable -> broker-confirmed -> rows marked
        published, on v3; then the raw kombu publisher (confirms, window 1,000) into the same
        cascade: the broker's own figure on the machine at that moment. Medians of ``runs``;
        PostgreSQL's block reads per message over the platform's runs (what each index costs)."""
        from rabbit import Outgoing
        from scheduling.config.conf import broker
        from topology import cascade

        platform, raw = [], []
        io_before, cost = self.index_io(), Cost(self.p)
        for _ in range(runs):
            endpoint = self.b.endpoint("rate", "v3")
            bodies = self.b.bodies(endpoint, [IN_FLIGHT_DAYS * 86400.0] * n)
            cost.start()
            started = time.perf_counter()
            self.b.post(bodies)
            wait_until(lambda: self.b.count(endpoint, "published") >= n, 600, 0.05, "rows published")
            platform.append(n / (time.perf_counter() - started))
            cost.stop()
            version = cascade.get_version("v3")
            with broker().session() as session:
                route = cascade.route(version, 3600, "nobody-raw")
                out = [Outgoing(route.exchange, route.routing_key, b"x" * 200, {"x-dp-due-at-ms": 0, **route.headers},
                                {"message_id": uuid.uuid4().hex}) for _ in range(n)]
                started = time.perf_counter()
                session.publish(out, window=1000)
                raw.append(n / (time.perf_counter() - started))
        io_after = self.index_io()
        blocks = {name: round((io_after[name] - io_before.get(name, 0)) / (n * runs), 2) for name in io_after}
        return {"per_s": statistics.median(platform), "runs": platform, "raw_per_s": statistics.median(raw),
                "raw_runs": raw, "blocks_per_message": blocks, "cost": cost.per_message(n * runs)}

    def index_io(self) -> dict[str, int]:
        """Shared-buffer blocks hit + read so far, the table's heap and each index."""
        rows = self.p.sql(
            "SELECT 'heap', heap_blks_hit + heap_blks_read FROM pg_statio_user_tables WHERE relname = %s "
            "UNION ALL SELECT indexrelname, idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes WHERE relname = %s",
            TABLE, TABLE)
        return {name: int(n) for name, n in rows}

    # --- idle lateness -----------------------------------------------------------------------------

    def lateness_idle(self, n: int, runs: int) -> dict:
        """``n`` messages of 1-30 s sent over 5 s, nothing else running: `make bench`'s case 1
        (bench/cases/idle.py), on v3. The median of the runs' p99 is the figure."""
        results = []
        for _ in range(runs):
            endpoint = self.b.endpoint("idle", "v3")
            for delays in idle_delays(self.b, n, 20):
                self.b.schedule(endpoint, delays, clients=1)
                time.sleep(0.25)
            wait_until(lambda: self.b.count(endpoint, "delivered") >= n, 180, 0.5, "idle deliveries")
            late = self.b.lateness(endpoint)
            results.append({**percentiles(late), "early": sum(x < 0 for x in late)})
        return {"p99_ms": statistics.median(r["p99"] for r in results), "runs": results}

    # --- delivered throughput ----------------------------------------------------------------------

    def throughput(self, n: int, runs: int, lead_s: float = 25.0) -> dict:
        """``n`` messages due at one instant (deliver_at = T, scheduled ~``lead_s`` before): they
        reach the worker ahead of T and are held (DELAY_DELIVERY_PREFETCH 20,000), so from T on
        the delivery loop records them as fast as it can. Throughput = n / (last delivered_at − T):
        messages recorded delivered per second, the delivery path's write rate into the table."""
        results, cost = [], Cost(self.p)
        for _ in range(runs):
            endpoint = self.b.endpoint("due-at-once", "v3")
            due = datetime.now(timezone.utc) + timedelta(seconds=lead_s)
            self.schedule_at(endpoint, due, n)
            time.sleep(max(0.0, (due - datetime.now(timezone.utc)).total_seconds()))
            cost.start()  # from the moment they fall due: the delivery loop's work
            wait_until(lambda: self.b.count(endpoint, "delivered") >= n, 300, 0.5, "deliveries due at once")
            cost.stop()
            (last,) = self.p.sql(
                f"SELECT EXTRACT(EPOCH FROM max(m.delivered_at) - %s) FROM {TABLE} m JOIN scheduling_endpoint e "
                "ON e.id = m.endpoint_id WHERE e.name = %s", due, endpoint)[0]
            late = self.b.lateness(endpoint)
            results.append({"per_s": n / float(last), "seconds": float(last), **percentiles(late)})
        return {"per_s": statistics.median(r["per_s"] for r in results), "runs": results,
                "cost": cost.per_message(n * runs)}

    def schedule_at(self, endpoint: str, due: datetime, n: int) -> None:
        at = due.isoformat().replace("+00:00", "Z")
        bodies = [json.dumps({"messages": [{"endpoint": endpoint, "payload": {"i": i + j}, "deliver_at": at}
                                           for j in range(min(1000, n - i))]}).encode() for i in range(0, n, 1000)]
        self.b.post(bodies)

    # --- bytes per message -------------------------------------------------------------------------

    def execute(self, statement: str) -> None:
        """A statement without rows (VACUUM cannot run in the harness's transaction-less helper)."""
        import psycopg

        with psycopg.connect(self.p.env["DATABASE_URL"], autocommit=True) as conn:
            conn.execute(statement)

    def part_bytes(self) -> dict[str, int]:
        """Bytes of the heap (with TOAST) and of each index."""
        rows = self.p.sql(
            "SELECT 'heap', pg_table_size(%s::regclass) UNION ALL "
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index WHERE indrelid = %s::regclass",
            TABLE, TABLE)
        return {name: int(size) for name, size in rows}

    def table_bytes(self) -> int:
        return int(self.p.sql("SELECT pg_total_relation_size(%s::regclass)", TABLE)[0][0])

    def bytes_per_message(self, n: int) -> dict:
        """Real messages through the platform (pending -> published -> delivered, three row
        versions each): the table with its indexes and TOAST before and after, per message.
        - written: ``n`` messages on a packed table (VACUUM FULL first): every version and its
          index entries (what a table that is never vacuumed keeps);
        - after VACUUM: VACUUM frees the dead versions; ``n`` more messages reuse that space: the
          growth a vacuumed table has per message (the steady state with autovacuum);
        - live: VACUUM FULL afterwards packs both batches: one live row and its entries.
        The steady state multiplies by the rows 7 days hold only what a finished message keeps:
        the indexes of messages in flight (IN_FLIGHT_ONLY) are as large as the messages in flight,
        whatever the retention, so their growth per message is left out of it."""
        self.execute(f"VACUUM FULL {TABLE}")
        packed, parts_packed = self.table_bytes(), self.part_bytes()
        self.deliver_batch(n)
        written, parts_written = self.table_bytes(), self.part_bytes()
        self.execute(f"VACUUM {TABLE}")
        vacuumed, parts_vacuumed = self.table_bytes(), self.part_bytes()
        self.deliver_batch(n)
        reused, parts_reused = self.table_bytes(), self.part_bytes()
        self.execute(f"VACUUM FULL {TABLE}")
        live = self.table_bytes()
        in_flight = sum(parts_reused.get(i, 0) - parts_vacuumed.get(i, 0) for i in IN_FLIGHT_ONLY)
        figures = {"written": (written - packed) / n, "after_vacuum": (reused - vacuumed) / n,
                   "live": (live - packed) / (2 * n)}
        steady = {**figures, "after_vacuum": figures["after_vacuum"] - in_flight / n}

        def by_part(after: dict, before: dict) -> dict:
            return {name: round((after[name] - before.get(name, 0)) / n, 1) for name in after}

        return {**{k: round(v, 1) for k, v in figures.items()},
                "written_by_part": by_part(parts_written, parts_packed),
                "after_vacuum_by_part": by_part(parts_reused, parts_vacuumed),
                "in_flight_indexes_after_vacuum": round(in_flight / n, 1),
                "steady_gb": {k: round(v * STEADY_ROWS / 1e9, 1) for k, v in steady.items()}, "messages": n}

    def deliver_batch(self, n: int) -> None:
        endpoint = self.b.endpoint("bytes", "v3")
        self.schedule_at(endpoint, datetime.now(timezone.utc) + timedelta(seconds=10), n)
        wait_until(lambda: self.b.count(endpoint, "delivered") >= n, 300, 0.5, "the batch delivered")


class Cost:
    """What a case's messages cost each part of the platform, summed over its runs: CPU
    microseconds (web, worker, PostgreSQL, RabbitMQ; bench/cpu_split.py's split) and the
    table's blocks PostgreSQL had to read from outside its shared buffers, per message. Beside
    the empty table's, they place a drop in a figure: the part whose cost per message grew."""

    def __init__(self, p):
        self.p, self.cpu, self.reads, self.split = p, {}, 0, None

    def disk_reads(self) -> int:
        (reads,) = self.p.sql(
            "SELECT coalesce(heap_blks_read, 0) + coalesce(idx_blks_read, 0) + coalesce(toast_blks_read, 0) "
            "+ coalesce(tidx_blks_read, 0) FROM pg_statio_user_tables WHERE relname = %s", TABLE)[0]
        return int(reads)

    def start(self) -> None:
        from bench.cpu_split import Split

        self.split = Split(self.p, self.p.workers[0].process.pid).start()
        self.reads_before = self.disk_reads()

    def stop(self) -> None:
        for name, seconds in self.split.stop().items():
            self.cpu[name] = self.cpu.get(name, 0.0) + seconds
        self.reads += self.disk_reads() - self.reads_before
        self.split = None

    def per_message(self, messages: int) -> dict:
        return {**{f"{name} µs": round(seconds * 1e6 / messages) for name, seconds in self.cpu.items()},
                "disk reads": round(self.reads / messages, 2)}


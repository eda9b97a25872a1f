"""What migration 0014's indexes cost each message written: the bulk scheduling rate, the
delivered throughput and the bytes per message with the indexes of 0013 and of 0014, on the same
table of N finished rows, alternated (A B A B …) so the machine's drift falls on both.

    .venv/bin/python -m bench.history_index_cost [--rows 10000000] [--rounds 2]

0013: (endpoint, status). 0014: instead, (endpoint, status) of the messages in flight and (endpoint,
status, topology, created_at, id) of the finished ones, plus the partial indexes of in-flight due
times and of messages scheduled in the past. A throwaway platform
(harness/platform.py); the worker is stopped while the indexes are swapped."""

from __future__ import annotations

import argparse
import json
import statistics
import time

import psycopg

from bench.history import Run
from bench.measure import idle_share
from harness.paths import ARTIFACTS
from harness.platform import platform

TABLE = "scheduling_scheduledmessage"
VARIANTS = {
    "0013": {"drop": ["message_endpoint_in_flight", "message_endpoint_history", "message_in_flight_due",
                      "message_in_past_created"],
             "create": [f"CREATE INDEX IF NOT EXISTS message_endpoint_status ON {TABLE} (endpoint_id, status)"]},
    "0014": {"drop": ["message_endpoint_status"],
             "create": [f"CREATE INDEX IF NOT EXISTS message_endpoint_in_flight ON {TABLE} (endpoint_id, status, topology_id, created_at, id) "
                        "WHERE status IN ('pending', 'published')",
                        f"CREATE INDEX IF NOT EXISTS message_endpoint_history ON {TABLE} (endpoint_id, status, topology_id, created_at, id) "
                        "WHERE status IN ('cancelled', 'delivered', 'failed')",
                        f"CREATE INDEX IF NOT EXISTS message_in_flight_due ON {TABLE} (due_at) "
                        "WHERE status IN ('pending', 'published')",
                        f"CREATE INDEX IF NOT EXISTS message_in_past_created ON {TABLE} (created_at) WHERE due_at < created_at"]},
}


def switch(run: Run, variant: str) -> None:
    for worker in run.p.workers:
        worker.stop(timeout=60)
    with psycopg.connect(run.p.env["DATABASE_URL"], autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        for name in VARIANTS[variant]["drop"]:
            conn.execute(f"DROP INDEX IF EXISTS {name}")
        for statement in VARIANTS[variant]["create"]:
            conn.execute(statement)
        conn.execute(f"VACUUM ANALYZE {TABLE}")
    for worker in run.p.workers:
        worker.start()
    run.bench.warm_up()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    results: dict[str, list] = {"0013": [], "0014": []}
    with platform(web_workers=4, settings="delayplatform.settings_test") as p:
        p.start_worker(name="platform", concurrency=2)
        run = Run(p, quick=False)
        run.endpoints()
        run.step(f"filling {args.rows:,} finished rows")
        run.grow_to(args.rows)
        for round_ in range(args.rounds):
            for variant in ("0013", "0014") if round_ % 2 == 0 else ("0014", "0013"):
                run.step(f"round {round_ + 1}: indexes of {variant}")
                switch(run, variant)
                idle = idle_share(2.0)
                rate = run.cases.scheduling_rate(args.messages, runs=3)
                throughput = run.cases.throughput(args.messages, runs=1)
                results[variant].append({"idle_share": idle, "rate": rate, "throughput": throughput})
                print(f"    {variant}: rate {rate['per_s']:,.0f}/s (raw {rate['raw_per_s']:,.0f}/s), throughput "
                      f"{throughput['per_s']:,.0f}/s, blocks per message {rate['blocks_per_message']}", flush=True)
    print(f"\nindexes of 0013 vs 0014 with {args.rows:,} finished rows, {args.rounds} rounds alternated:")
    summary = {}
    for variant, runs in results.items():
        summary[variant] = {
            "rate": statistics.median(r for one in runs for r in one["rate"]["runs"]),
            "raw": statistics.median(r for one in runs for r in one["rate"]["raw_runs"]),
            "throughput": statistics.median(one["throughput"]["per_s"] for one in runs),
        }
        print(f"  {variant}: scheduling {summary[variant]['rate']:,.0f}/s (raw publisher {summary[variant]['raw']:,.0f}/s), "
              f"delivered {summary[variant]['throughput']:,.0f}/s")
    for key in ("rate", "throughput"):
        print(f"  0014 / 0013 {key}: {summary['0014'][key] / summary['0013'][key]:.3f}")
    out = ARTIFACTS / f"bench-history-index-cost-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"rows": args.rows, "results": results, "summary": summary}, indent=2, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
